"""Gradient training: LoRA SFT, DPO, GRPO and GSPO through TRL + PEFT (docs/gradient.md).

    gym train sft trainer/configs/sft_smollm2.yaml --publish alice/sft

Modules: `config` (the YAML config, validated), `formats` (alpaca / sharegpt / preference /
prompt rows -> TRL's formats), `rewards` (the Training-Free GRPO verifiers as TRL reward
functions), `train` (TRL trainer + PEFT adapter -> `adapter/` and `run.json`), `progress` (a
rich bar as a `TrainerCallback`), `cli`, `demo`, `sample_data` (the bundled datasets).
Importing this package does not import torch.

>>> from trainer.gradient import validate_config
>>> config = validate_config({"model": "tiny-random", "dataset": {
...     "path": "trainer/data/sft_arith_alpaca.jsonl", "format": "alpaca"}})
>>> sft = config.for_method("sft")
>>> sft.output_dir, sft.lora.r, sft.training.seed
('runs/sft', 8, 0)
>>> config.for_method("dpo")
Traceback (most recent call last):
...
trainer.tfgrpo_config.ConfigError: config: dataset.format 'alpaca' does not fit dpo: use preference
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "trainer.gradient.config": ["GradientConfig", "load_config", "validate_config"],
    "trainer.gradient.formats": ["DatasetFormatError", "load_dataset_rows"],
    "trainer.gradient.train": ["QLoRAUnavailableError", "RunDirectoryError", "TrainResult",
        "train"],
})
