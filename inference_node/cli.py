"""``gym node``: run an inference node (thin over `inference_node.server`).

    gym node serve --model DIR --library LIB.json [--host H] [--port P] [--max-queue N]

Mount with ``app.add_typer(inference_node.cli.app, name="node")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(help="Run an inference node: an OpenAI-compatible server over a frozen model.",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.callback()
def node() -> None:
    """Run an inference node: an OpenAI-compatible server over a frozen model."""


@app.command()
def serve(
    model: Annotated[Path, typer.Option(help="Hugging Face model directory (safetensors, "
                                             "tokenizer with a chat template).",
                                        exists=True, file_okay=False)],
    library: Annotated[Path | None, typer.Option(
        help="Experience library JSON ({log_id, size, root, experiences: [{id, text}]}), "
             "injected into every prompt. Omit to serve with no library.",
        exists=True, dir_okay=False)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_queue: Annotated[int, typer.Option(help="Waiting requests before answering 429.")] = 64,
    max_batch: Annotated[int, typer.Option(help="Requests decoded together.")] = 8,
    served_model_name: Annotated[str | None, typer.Option(
        help="Model id in /v1/models; default: the model directory's name.")] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 …; default: cuda "
                                                    "when available.")] = None,
    no_prefix_reuse: Annotated[bool, typer.Option(
        "--no-prefix-reuse", help="Recompute the library prefix for every request.")] = False,
) -> None:
    """Serve /v1/models, /v1/chat/completions, /v1/completions, /health and /metrics.

    This version serves a static library file with the transformers engine. Not yet here:
    verified sync of the curated library from chain + IPFS, signed receipts, registration in
    the NodeRegistry, and the vLLM engine.
    """
    import uvicorn

    from inference_node.engine import TransformersEngine
    from inference_node.library import StaticLibrarySource
    from inference_node.server import create_app
    from inference_node.settings import NodeSettings

    settings = NodeSettings(served_model_name=served_model_name, max_queue=max_queue,
                            host=host, port=port)
    source = StaticLibrarySource.from_file(library) if library else StaticLibrarySource()
    with console.status(f"loading {model}"):
        engine = TransformersEngine.from_pretrained(model, device=device, max_batch=max_batch,
                                                    prefix_reuse=not no_prefix_reuse)
    snapshot = source.current()
    console.print(f"serving [bold]{settings.served_model_name or engine.model_name}[/] on "
                  f"http://{host}:{port}/v1 with {len(snapshot.experiences)} experiences "
                  f"(library {snapshot.version})")
    uvicorn.run(create_app(engine, source, settings), host=host, port=port, log_level="info")
