"""Training: Training-Free GRPO (an experience library for a frozen model).

    gym train tfgrpo trainer/configs/tfgrpo_smollm2.yaml      # see docs/tfgrpo.md
    gym eval --library runs/tfgrpo-smollm2/library.json --dataset trainer/data/arith_heldout.jsonl

Modules: `tfgrpo_config` (the config), `tfgrpo_trainer` (the loop), `tfgrpo_prompts` and
`tfgrpo_operations` (its prompts and library updates), `backends` (local and HTTP
models), `verifiers` (rewards), `evaluate` (Mean@k / Pass@k), `data` (the generated data set).
Importing this package does not import torch; the backends load it when a model is built.

>>> from trainer import TFGRPOConfig
>>> TFGRPOConfig(group_size=5, verifier="math").max_experience_words
32
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "trainer.tfgrpo_config": ["ConfigError", "ModelConfig", "TFGRPOConfig"],
    "trainer.tfgrpo_prompts": ["Experience"],
    "trainer.tfgrpo_trainer": ["ResumeError", "TFGRPOTrainer"],
})
