"""Record the request bodies of the client libraries the project's venv does not install, for
`test_saved_answers` to replay verbatim: openai 3.x, pydantic-ai, openai-agents, dspy and
llama-index-llms-openai-like (`client_requests.json`, beside this file).

Run once per library, each in a venv of its own holding the version to record::

    python -m venv /tmp/v && /tmp/v/bin/pip install 'pydantic-ai-slim[openai]==2.78.0'
    /tmp/v/bin/python tests/inference_node/record_client_requests.py pydantic-ai

It serves canned OpenAI-shaped answers on loopback (a call whose arguments fit the tool's
schema, JSON for a response format, dspy's field markers, text otherwise), runs the library's
scenario (what its users do for tool-based or structured output) and writes the bodies it sent,
as parsed from the wire, with the library's version into the file. Not a test: pytest does not
collect it.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

OUT = Path(__file__).with_name("client_requests.json")
MODEL = "tiny-llama"  # node_helpers.MODEL_NAME
QUESTION = "Is 2 + 3 = 5?"
SENT: list[dict] = []


class Verdict(BaseModel):
    """Whether the sum is right."""

    correct: bool
    confidence: Literal["low", "high"]


def example(schema: dict):
    """A value of a simple schema (objects of booleans, integers, strings and enums)."""
    if "enum" in schema:
        return schema["enum"][-1]
    if schema.get("type") == "object":
        return {k: example(v) for k, v in schema.get("properties", {}).items()}
    return {"boolean": True, "integer": 2, "number": 2, "string": "x"}.get(schema.get("type"))


def canned(body: dict) -> dict:
    tools, choice = body.get("tools"), body.get("tool_choice")
    last = (body.get("messages") or [{}])[-1]
    message: dict = {"role": "assistant", "content": None}
    finish = "stop"
    if tools and choice != "none" and last.get("role") != "tool":
        name = choice["function"]["name"] if isinstance(choice, dict) else \
            tools[0]["function"]["name"]
        tool = next(t["function"] for t in tools if t["function"]["name"] == name)
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {
            "name": name, "arguments": json.dumps(example(tool.get("parameters") or {}))}}]
        finish = "tool_calls"
    elif (body.get("response_format") or {}).get("type") == "json_schema":
        message["content"] = json.dumps(example(
            body["response_format"]["json_schema"]["schema"]))
    elif "[[ ## " in json.dumps(body.get("messages")):
        message["content"] = ("[[ ## correct ## ]]\nTrue\n\n[[ ## confidence ## ]]\nhigh\n\n"
                              "[[ ## completed ## ]]")
    else:
        message["content"] = "5"
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


class Canned(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        SENT.append(body)
        answer = canned(body)
        if not body.get("stream"):
            self._send(json.dumps(answer), "application/json")
            return
        choice = answer["choices"][0]
        delta = {"role": "assistant", **{k: v for k, v in choice["message"].items() if v}}
        for i, call in enumerate(delta.get("tool_calls", ())):
            call["index"] = i
        chunk = {**answer, "object": "chat.completion.chunk", "usage": None, "choices": [
            {"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}
        usage = {**chunk, "choices": [], "usage": answer["usage"]}
        self._send("".join(f"data: {json.dumps(c)}\n\n" for c in (chunk, usage))
                   + "data: [DONE]\n\n", "text/event-stream")

    def _send(self, text: str, kind: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def openai_3(url: str) -> str:
    import openai

    tools = [{"type": "function", "function": {"name": "Verdict", "description": Verdict.__doc__,
                                               "parameters": Verdict.model_json_schema()}}]
    list(openai.OpenAI(base_url=url, api_key="x").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], tools=tools,
        tool_choice="required", max_completion_tokens=48, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    return "openai"


def pydantic_ai(url: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=url, api_key="x"))
    Agent(model, output_type=Verdict,  # its default output: a tool call
          model_settings={"temperature": 0, "max_tokens": 48}).run_sync(QUESTION)
    return "pydantic-ai-slim"


def openai_agents(url: str) -> str:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    set_tracing_disabled(True)  # else it exports traces to OpenAI
    model = OpenAIChatCompletionsModel(model=MODEL,
                                       openai_client=AsyncOpenAI(base_url=url, api_key="x"))
    settings = ModelSettings(temperature=0, max_tokens=48)
    Runner.run_sync(Agent(name="judge", instructions="Judge the sum.", output_type=Verdict,
                          model=model, model_settings=settings), QUESTION)
    Runner.run_sync(Agent(name="adder", instructions="Use the tool.", tools=[add], model=model,
                          model_settings=settings), "What is 2 + 3?")  # a call, then its result
    return "openai-agents"


def dspy_predict(url: str) -> str:
    import dspy

    class Judge(dspy.Signature):
        """Judge whether the sum is right."""

        question: str = dspy.InputField()
        correct: bool = dspy.OutputField()
        confidence: Literal["low", "high"] = dspy.OutputField()

    lm = dspy.LM(f"openai/{MODEL}", api_base=url, api_key="x", temperature=0, max_tokens=48,
                 cache=False)
    with dspy.context(lm=lm):
        dspy.Predict(Judge)(question=QUESTION)
    return "dspy"


def llama_index(url: str) -> str:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.prompts import PromptTemplate
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model=MODEL, api_base=url, api_key="x", is_chat_model=True,
                     is_function_calling_model=True, temperature=0, max_tokens=48,
                     context_window=4096)
    llm.structured_predict(Verdict, PromptTemplate(QUESTION))
    llm.chat([ChatMessage(role="user", content=QUESTION)])
    return "llama-index-llms-openai-like"


SCENARIOS = {"openai 3.x": openai_3, "pydantic-ai": pydantic_ai, "openai-agents": openai_agents,
             "dspy": dspy_predict, "llama-index-llms-openai-like": llama_index}


def main(names: list[str]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    recorded = json.loads(OUT.read_text()) if OUT.exists() else {"libraries": {}}
    for name in names:
        SENT.clear()
        package = SCENARIOS[name](url)
        recorded["libraries"][name] = {"package": package, "version": version(package),
                                       "requests": list(SENT)}
        print(f"{name}: {package} {version(package)}, {len(SENT)} requests")
    server.shutdown()
    OUT.write_text(json.dumps(recorded, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or list(SCENARIOS))
