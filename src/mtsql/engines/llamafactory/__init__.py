"""LLaMA-Factory 0.9.5 for the warm-start SFT (docs/engines.md): dataset export, YAML, launch, LoRA merge.

    stats = export_sharegpt(trajectories, work / "data", tokenizer_path=model, template="qwen3",
                            cutoff_len=cfg.sft.cutoff_len)
    plan = plan_sft(cfg.sft, model_path=model, template="qwen3", work_dir=work, seed=cfg.seed)
    print(plan.describe())                      # --dry-run: the exact files and command lines
    result = run_sft(plan, log_path=work / "log.txt", expected_examples=stats.examples)
    plan.model_dir                              # the trained Hugging Face model folder

Everything is written inside the folders it is given; marking a stage complete is the caller's job.
"""

from mtsql.engines.llamafactory.dataset import (
    ExportStats,
    Tokenized,
    dataset_entry,
    encode_dataset,
    export_sharegpt,
    to_sharegpt,
)
from mtsql.engines.llamafactory.plan import (
    SftPlan,
    export_command,
    merge_config,
    plan_sft,
    train_command,
    train_config,
)
from mtsql.engines.llamafactory.train import (
    TrainResult,
    check_model_dir,
    merge_lora,
    run_sft,
    run_train,
    training_curve,
)

__all__ = [
    "ExportStats",
    "SftPlan",
    "Tokenized",
    "TrainResult",
    "check_model_dir",
    "dataset_entry",
    "encode_dataset",
    "export_command",
    "export_sharegpt",
    "merge_config",
    "merge_lora",
    "plan_sft",
    "run_sft",
    "run_train",
    "to_sharegpt",
    "train_command",
    "train_config",
    "training_curve",
]
