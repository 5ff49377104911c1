"""``gym train sft|dpo|kto|orpo|grpo|gspo``: thin commands over `trainer.gradient.train`.

    gym train sft  trainer/configs/sft_smollm2.yaml  [--output DIR] [--max-steps N] [--publish LOG]
                                                     [--num-processes N]
    gym train dpo  trainer/configs/dpo_smollm2.yaml
    gym train kto  trainer/configs/kto_smollm2.yaml
    gym train orpo trainer/configs/orpo_smollm2.yaml
    gym train grpo trainer/configs/grpo_smollm2.yaml
    gym train gspo trainer/configs/gspo_smollm2.yaml

`register(train_app)` adds the six commands to `gym train` (devnet/cli.py calls it). Importing
this module does not import torch; the commands load TRL when they run.
"""

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()

SUMMARIES = {
    "sft": "LoRA supervised fine-tuning (TRL SFTTrainer) on alpaca or sharegpt rows.",
    "dpo": "LoRA direct preference optimisation (TRL DPOTrainer) on prompt/chosen/rejected pairs.",
    "kto": "LoRA KTO (TRL KTOTrainer) on prompt/completion rows labelled desirable or not.",
    "orpo": "LoRA ORPO (TRL's experimental ORPOTrainer): SFT plus an odds-ratio preference term.",
    "grpo": "LoRA GRPO (TRL GRPOTrainer) on problem/answer rows, rewarded by the verifiers.",
    "gspo": "LoRA GSPO: GRPO with sequence-level importance ratios (TRL GRPOTrainer).",
}


def _train_command(method: str):
    def command(
        ctx: typer.Context,
        config_path: Annotated[Path, typer.Argument(
            metavar="CONFIG.yaml", help=f"Run config (see docs/gradient.md); its `method:` must "
                                        f"be {method} or absent.", exists=True, dir_okay=False)],
        output: Annotated[Path | None, typer.Option(
            help="Run directory (overrides the config's output_dir).")] = None,
        max_steps: Annotated[int | None, typer.Option(
            min=1, help="Stop after N optimizer steps (overrides training.max_steps/epochs).")
        ] = None,
        publish: Annotated[str | None, typer.Option(
            help="Then publish the adapter to this ledger log (created if new) and anchor it.")
        ] = None,
        num_processes: Annotated[int, typer.Option(
            min=1, max=64, help="Train data-parallel with N processes on this machine (torch "
                                "distributed through accelerate: gloo on CPU, NCCL with one GPU "
                                "each); rank 0 writes the run. See docs/gradient.md.")] = 1,
        accelerate_config: Annotated[Path | None, typer.Option(
            exists=True, dir_okay=False, metavar="FILE",
            help="Train with the ranks an accelerate config file describes (`accelerate "
                 "config`; trainer/configs/accelerate/: DDP on CPUs or GPUs, FSDP, DeepSpeed "
                 "ZeRO); --num-processes overrides its num_processes.")] = None,
        swarm: Annotated[str | None, typer.Option(
            metavar="RUN", rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Start or join the collaborative run RUN: peers anywhere average their "
                 "gradients through hivemind; --max-steps counts the run's collaborative "
                 "steps.")] = None,
        initial_peers: Annotated[list[str] | None, typer.Option(
            metavar="MADDR", envvar="GYM_SWARM_PEERS", rich_help_panel="Volunteer training "
            "(docs/swarm.md)", help="A peer of the run to join through (the `swarm peer:` line "
                                   "another peer printed); repeatable.")] = None,
        target_batch_size: Annotated[int | None, typer.Option(
            min=1, rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Samples per collaborative step, all peers together [default: 4 local "
                 "batches; with --local-steps H, H local batches times --min-peers].")] = None,
        local_steps: Annotated[int, typer.Option(
            min=0, max=100_000, metavar="H", rich_help_panel="Volunteer training (docs/swarm.md)",
            help="DiLoCo-style: each peer steps its own optimizer every local batch, and the "
                 "peers average parameters once per collaborative step (about every H local "
                 "steps); 0 averages gradients every step.")] = 0,
        min_peers: Annotated[int, typer.Option(
            min=1, max=1024, rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Hold the first step until this many peers joined.")] = 1,
        host_maddrs: Annotated[list[str] | None, typer.Option(
            metavar="MADDR", rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Listen here (repeatable) [default: /ip4/0.0.0.0/tcp/0].")] = None,
        announce_maddrs: Annotated[list[str] | None, typer.Option(
            metavar="MADDR", rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Tell the peers to reach this peer here (repeatable): a public address, or a "
                 "relay's for a peer behind NAT.")] = None,
        compression: Annotated[str, typer.Option(
            rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Compress averaged gradients and parameters: none, float16 or 8bit.")
        ] = "none",
        matchmaking_time: Annotated[float, typer.Option(
            min=0.5, max=600, rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Seconds a round waits to gather its group (3-5 on one network, 10-15 over "
                 "the internet).")] = 5.0,
        averaging_timeout: Annotated[float, typer.Option(
            min=1, max=3600, rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Seconds an averaging round may take before it is dropped (a peer that died "
                 "mid-round holds its group this long).")] = 60.0,
        check_steps: Annotated[int, typer.Option(
            min=0, max=64, rich_help_panel="Volunteer training (docs/swarm.md)",
            help="Claimed local steps of each other member this peer re-computes per round; "
                 "another peer's round is credited only when a check of it passed (0: credit "
                 "nobody else).")] = 1,
        account: Annotated[int | None, typer.Option(
            "--account", rich_help_panel="Volunteer training (docs/swarm.md)",
            help="With --swarm: Anvil's account N signs this peer's contribution records "
                 "(devnet only; else GYM_PUBLISHER_KEY, else on the devnet account 0).")
        ] = None,
    ) -> None:
        from trainer.gradient.config import load_config

        config = load_config(config_path, method=method,
                             output_dir=str(output) if output else None, max_steps=max_steps)
        from trainer.errors import TrainerError
        from trainer.tfgrpo_config import ConfigError

        try:  # a bad dataset fails now, before the base model loads
            check_dataset(config)
        except TrainerError as exc:
            raise ConfigError(f"{config_path}: dataset: {exc}") from None
        if publish:  # fail on a missing devnet before training, not after
            from ledger.runtime import runtime_of

            runtime_of(ctx).contract.log_count()
        swarm_flags = {"--initial-peers": initial_peers, "--target-batch-size": target_batch_size,
                       "--local-steps": local_steps != 0,
                       "--min-peers": min_peers != 1, "--host-maddrs": host_maddrs,
                       "--announce-maddrs": announce_maddrs, "--account": account is not None,
                       "--compression": compression != "none",
                       "--matchmaking-time": matchmaking_time != 5.0,
                       "--averaging-timeout": averaging_timeout != 60.0,
                       "--check-steps": check_steps != 1}
        if swarm is None:
            used = [flag for flag, value in swarm_flags.items() if value]
            if used:
                raise typer.BadParameter(f"{used[0]} applies to a --swarm run")
        elif num_processes > 1 or accelerate_config is not None:
            flag = "--num-processes" if num_processes > 1 else "--accelerate-config"
            raise typer.BadParameter(f"--swarm and {flag}: one at a time (a peer of a swarm "
                                     "trains in one process)")
        launch_config = None
        if accelerate_config is not None:
            from trainer.gradient.accelerate_config import check_available, read_accelerate_config

            launch_config = read_accelerate_config(accelerate_config)
            check_available(launch_config)
            if num_processes == 1:
                num_processes = launch_config.num_processes
        if swarm is not None:
            from ledger.runtime import runtime_of
            from trainer.swarm.peer import SwarmOptions, SwarmSession

            runtime = runtime_of(ctx)
            runtime.account = account
            options = SwarmOptions(
                run=swarm, initial_peers=tuple(initial_peers or ()),
                target_batch_size=target_batch_size, local_steps=local_steps,
                min_peers=min_peers, host_maddrs=tuple(host_maddrs or ("/ip4/0.0.0.0/tcp/0",)),
                announce_maddrs=tuple(announce_maddrs or ()), compression=compression,
                matchmaking_time=matchmaking_time, averaging_timeout=averaging_timeout,
                check_steps=check_steps)
            key = (os.environ.get("GYM_PUBLISHER_KEY") if account is None else None) \
                or runtime.recorded_signing_key()
            if key is None:
                raise typer.BadParameter("--swarm needs a key to sign contribution records: "
                                         "set GYM_PUBLISHER_KEY")
            session = SwarmSession(config, options, key, console)
            run_dir = run_training(config, swarm=session).run_dir
        elif num_processes > 1 or (launch_config is not None and launch_config.on_gpus):
            run_dir = run_distributed(config, config_path, num_processes,
                                      max_steps=max_steps, accelerate_config=launch_config)
        else:
            run_dir = run_training(config).run_dir
        if publish:
            from trainer.reports import publish_and_show

            publish_and_show(console, runtime_of(ctx), run_dir, publish)

    command.__doc__ = (f"{SUMMARIES[method]}\n\nWrites DIR/adapter (PEFT: adapter_config.json + "
                       "adapter_model.safetensors) and DIR/run.json (config, code and package "
                       "versions, hardware, dataset digest, metric curves). With --publish LOG "
                       "the adapter files go to the content store and a `run` and an `adapter` "
                       "entry are appended to LOG and anchored.")
    return command


def check_dataset(config) -> None:
    """Read and convert every row of the config's dataset (chat form); raises
    `DatasetFormatError` naming the file and row on the first bad one."""
    from trainer.gradient.formats import load_dataset_rows

    section = config.dataset
    load_dataset_rows(section.path, section.format, chat=True,
                      system_prompt=section.system_prompt, limit=section.limit)


def run_training(config, console: Console = console, swarm=None):
    """Train with a progress bar and print the run's summary; returns the `TrainResult`
    (`trainer.gradient.progress.train_with_progress` on this module's console)."""
    from trainer.gradient.progress import train_with_progress

    return train_with_progress(config, console, swarm=swarm)


def run_distributed(config, config_path: Path, num_processes: int, *,
                    max_steps: int | None, accelerate_config=None) -> Path:
    """Train ``config`` with ``num_processes`` ranks (``trainer.gradient.distributed``; rank 0
    shows the progress and the summary); the run directory."""
    from trainer.gradient.distributed import launch
    from trainer.gradient.train import check_run_dir

    run_dir = Path(config.output_dir)
    check_run_dir(run_dir)  # before N processes load the model
    gpus = accelerate_config is not None and accelerate_config.on_gpus
    how = (f"{accelerate_config.distributed_type} through accelerate launch" if gpus
           else "torch distributed")
    console.print(f"{config.method}: {num_processes} processes ({how})", highlight=False)
    launch(config_path.resolve(), config.method, run_dir.resolve(), max_steps, num_processes,
           accelerate_config=accelerate_config.path.resolve() if gpus else None)
    return run_dir


def register(train_app: typer.Typer) -> None:
    """Add the gradient-training commands to ``gym train``."""
    for method, summary in SUMMARIES.items():
        train_app.command(method, help=None, short_help=summary)(_train_command(method))
