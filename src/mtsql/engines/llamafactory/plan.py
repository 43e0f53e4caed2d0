"""What ``llamafactory-cli`` is asked to do: the training and merge YAML files and the command lines.

Pure functions with no side effect, so ``plan_sft`` shows as a dry run exactly what ``run_sft``
then writes and executes. Layout inside a stage's work folder::

    data/dataset_info.json, data/<dataset>.jsonl   (export_sharegpt)
    deepspeed.json    DeepSpeed ZeRO settings (sft.deepspeed other than none)
    train.yaml        llamafactory-cli train
    adapter/          LoRA adapter (lora) | model/ the trained model itself (full)
    merge.yaml        llamafactory-cli export (lora only)
    model/            the merged Hugging Face model folder

``HF_HUB_OFFLINE=1`` is set only when the model is a local folder
(``mtsql.engines.models.registry.resolve_model`` downloads Hub models first), so a Hub id given by hand
is still fetched by LLaMA-Factory.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from mtsql.base.errors import StageFailed, UsageError
from mtsql.base.trackers import Trackers
from mtsql.engines.commands import Command
from mtsql.engines.llamafactory.dataset import llamafactory_template
from mtsql.engines.llamafactory.settings import SftConfig
from mtsql.engines.models.registry import is_hub_id
from mtsql.engines.passthrough import check_extra

FINETUNING_TYPES = ("lora", "full", "freeze")
LABELLED_LOGITS_ENTRY = "mtsql.engines.llamafactory.labelled_logits"
MISSING = "LLaMA-Factory (llamafactory-cli) not found: install llamafactory==0.9.5 in this environment"
# keys train_config sets only in some configurations: sft.extra may not set them either
CONDITIONAL_KEYS = (
    "max_steps",
    "num_train_epochs",
    "use_cpu",
    "disable_gradient_checkpointing",
    "save_only_model",
    "lora_rank",
    "lora_alpha",
    "lora_target",
    "freeze_trainable_layers",
    "freeze_trainable_modules",
    "deepspeed",
    "run_name",
    "ddp_backend",
)


@dataclass(frozen=True)
class SftPlan:
    """Every file and command of one SFT run; ``model_dir`` is the Hugging Face folder it produces."""

    dataset_dir: Path
    dataset: str
    train_yaml: Path
    train_config: dict
    train: Command
    trainer_dir: Path  # llamafactory's output_dir: the adapter (lora) or the model (full)
    model_dir: Path
    merge_yaml: Path | None = None
    merge_config: dict | None = None
    merge: Command | None = None
    deepspeed_json: Path | None = None
    deepspeed_config: dict | None = None

    def files(self) -> dict[Path, str]:
        """The files to write (DeepSpeed JSON, YAML), path -> text."""
        out = {}
        if self.deepspeed_json and self.deepspeed_config:
            out[self.deepspeed_json] = json.dumps(self.deepspeed_config, indent=2) + "\n"
        out[self.train_yaml] = yaml_text(self.train_config)
        if self.merge_yaml and self.merge_config:
            out[self.merge_yaml] = yaml_text(self.merge_config)
        return out

    def commands(self) -> list[Command]:
        return [self.train] + ([self.merge] if self.merge else [])

    def describe(self) -> str:
        """A dry run: the files (with their text) and the commands, in order."""
        parts = [f"dataset: {self.dataset_dir / 'dataset_info.json'} ({self.dataset})"]
        for path, text in self.files().items():
            parts.append(f"--- {path}\n{text.rstrip()}")
        parts += [f"$ {command.shell()}" for command in self.commands()]
        parts.append(f"model: {self.model_dir}")
        return "\n".join(parts) + "\n"


def plan_sft(
    sft_cfg: SftConfig,
    *,
    model_path: str | Path,
    template: str,
    work_dir: Path,
    dataset: str = "mtsql_sft",
    seed: int = 0,
    trackers: Trackers | None = None,
) -> SftPlan:
    """The files and commands that fine-tune ``model_path`` on ``work_dir/data/<dataset>``; ``trackers``: the
    stage's dashboards, which the HF Trainer's loggers (``report_to``) write to as well."""
    trackers = trackers or Trackers.off()
    work_dir = Path(work_dir)
    dataset_dir, model_dir = work_dir / "data", work_dir / "model"
    trainer_dir = work_dir / "adapter" if sft_cfg.finetuning_type == "lora" else model_dir
    ds_config = deepspeed_config(sft_cfg.deepspeed)
    ds_json = work_dir / "deepspeed.json" if ds_config else None
    config = train_config(
        sft_cfg,
        model_path=model_path,
        template=template,
        dataset_dir=dataset_dir,
        dataset=dataset,
        output_dir=trainer_dir,
        seed=seed,
        deepspeed_json=ds_json,
        trackers=trackers,
    )
    train_yaml = work_dir / "train.yaml"
    plan = SftPlan(
        dataset_dir=dataset_dir,
        dataset=dataset,
        train_yaml=train_yaml,
        train_config=config,
        train=train_command(train_yaml, sft_cfg, model_path=model_path, trackers=trackers),
        trainer_dir=trainer_dir,
        model_dir=model_dir,
        deepspeed_json=ds_json,
        deepspeed_config=ds_config,
    )
    if sft_cfg.finetuning_type != "lora":  # full and freeze write a whole model: nothing to merge
        return plan
    merge_yaml = work_dir / "merge.yaml"
    return replace(
        plan,
        merge_yaml=merge_yaml,
        merge=export_command(merge_yaml, model_path=model_path),
        merge_config=merge_config(
            model_path=model_path, adapter_dir=trainer_dir, template=template, export_dir=model_dir
        ),
    )


def train_config(
    sft_cfg: SftConfig,
    *,
    model_path: str | Path,
    template: str,
    dataset_dir: Path,
    dataset: str,
    output_dir: Path,
    seed: int = 0,
    deepspeed_json: Path | None = None,
    trackers: Trackers | None = None,
) -> dict:
    """The ``llamafactory-cli train`` YAML as a dict: loss on every assistant turn, none on prompts;
    ``report_to`` the trackers that are on (their run named as the stage's); ``sft.extra`` merged in last."""
    trackers = trackers or Trackers.off()
    if sft_cfg.finetuning_type not in FINETUNING_TYPES:
        raise UsageError(
            f"sft.finetuning_type must be one of {', '.join(FINETUNING_TYPES)}, "
            f"got {sft_cfg.finetuning_type!r}"
        )
    if not 0 <= sft_cfg.warmup_ratio < 1:
        raise UsageError(f"sft.warmup_ratio must be in [0, 1), got {sft_cfg.warmup_ratio}")
    if not isinstance(sft_cfg.extra, dict):
        raise UsageError(f"sft.extra must be a mapping of LLaMA-Factory YAML keys, got {sft_cfg.extra!r}")
    config: dict = {
        "model_name_or_path": str(model_path),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": sft_cfg.finetuning_type,
    }
    if sft_cfg.finetuning_type == "lora":
        config.update(
            lora_rank=sft_cfg.lora_rank, lora_alpha=sft_cfg.lora_alpha, lora_target=sft_cfg.lora_target
        )
    if sft_cfg.finetuning_type == "freeze":
        if sft_cfg.trainable_layers < 1:
            raise UsageError(
                f"sft.finetuning_type=freeze trains the last sft.trainable_layers decoder layers: "
                f"set it to 1 or more, got {sft_cfg.trainable_layers}"
            )
        config.update(freeze_trainable_layers=sft_cfg.trainable_layers, freeze_trainable_modules="all")
    config.update(
        dataset=dataset,
        dataset_dir=str(dataset_dir),
        **_template_key(template),
        cutoff_len=sft_cfg.cutoff_len,
        train_on_prompt=False,  # no loss on system/user/observation tokens
        mask_history=False,  # true would train only the last assistant turn of a trajectory
        overwrite_cache=True,
        preprocessing_num_workers=1,
        dataloader_num_workers=0,
        output_dir=str(output_dir),
        overwrite_output_dir=True,
        logging_steps=1,
        save_strategy="no",
        report_to=list(trackers.names) or "none",
        per_device_train_batch_size=sft_cfg.batch_size,
        gradient_accumulation_steps=sft_cfg.grad_accum,
        learning_rate=sft_cfg.learning_rate,
        lr_scheduler_type=sft_cfg.lr_scheduler_type,
        warmup_steps=sft_cfg.warmup_ratio,  # transformers 5: a value below 1 is a fraction of the steps
        seed=seed,
        bf16=sft_cfg.bf16,
        fp16=False,
    )
    if sft_cfg.max_steps is not None:
        config["max_steps"] = sft_cfg.max_steps
    else:
        config["num_train_epochs"] = sft_cfg.epochs
    if sft_cfg.use_cpu:
        config["use_cpu"] = True
        if (
            sft_cfg.nnodes * sft_cfg.nproc_per_node > 1
        ):  # said, not left to accelerate's guess (ccl, MPI, gloo)
            config["ddp_backend"] = "gloo"
    if not sft_cfg.gradient_checkpointing:
        config["disable_gradient_checkpointing"] = True
    if sft_cfg.finetuning_type != "lora":
        config["save_only_model"] = True
    if deepspeed_json is not None:
        config["deepspeed"] = str(deepspeed_json)
    if trackers:
        config["run_name"] = trackers.run_name
    check_extra(
        sft_cfg.extra, [*config, *CONDITIONAL_KEYS], setting="sft.extra", allowed=sft_cfg.extra_override
    )
    return {**config, **sft_cfg.extra}


def deepspeed_config(stage: str) -> dict | None:
    """The DeepSpeed JSON of ``sft.deepspeed`` (None for ``none``).

    Batch sizes, clipping, precision and optimizer values are ``"auto"``: the HF Trainer fills them
    from the training YAML, so the two cannot disagree. ZeRO-3 gathers the 16-bit weights when
    saving, so the result is an ordinary model folder; with offload, DeepSpeed runs its own CPU
    AdamW (a C++ extension it compiles on first use).
    """
    if stage == "none":
        return None
    config: dict = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_allow_untested_optimizer": True,
    }
    zero: dict = {
        "stage": 2 if stage == "z2" else 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if stage == "z2":
        zero.update(allgather_partitions=True, reduce_scatter=True)
    else:
        zero.update(
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_gather_16bit_weights_on_model_save=True,
        )
    if stage == "z3_offload":
        zero.update(
            offload_optimizer={"device": "cpu", "pin_memory": True},
            offload_param={"device": "cpu", "pin_memory": True},
        )
        config["optimizer"] = {
            "type": "AdamW",
            "params": dict.fromkeys(("lr", "betas", "eps", "weight_decay"), "auto"),
        }
    config["zero_optimization"] = zero
    return config


def merge_config(*, model_path: str | Path, adapter_dir: Path, template: str, export_dir: Path) -> dict:
    """The ``llamafactory-cli export`` YAML that merges a LoRA adapter into its base model (on CPU)."""
    return {
        "model_name_or_path": str(model_path),
        "adapter_name_or_path": str(adapter_dir),
        **_template_key(template),
        "finetuning_type": "lora",
        "export_dir": str(export_dir),
        "export_device": "cpu",
        "export_legacy_format": False,
    }


def train_command(
    yaml_path: Path, sft_cfg: SftConfig, *, model_path: str | Path, trackers: Trackers | None = None
) -> Command:
    """``llamafactory-cli train YAML``, through torchrun when more than one process is asked for or
    DeepSpeed is on (LLaMA-Factory runs DeepSpeed only under torchrun). A single CPU process runs
    LLaMA-Factory's trainer through ``labelled_logits`` instead (same YAML, same trainer). Its environment
    holds where the ``trackers`` write (``Trackers.env``)."""
    env = engine_env(model_path) | (trackers or Trackers.off()).env()
    if sft_cfg.deepspeed != "none" and sft_cfg.use_cpu:
        raise UsageError(
            f"sft.deepspeed={sft_cfg.deepspeed} trains on GPUs: set sft.use_cpu: false "
            "(or sft.deepspeed: none on a CPU machine)"
        )
    if sft_cfg.nnodes > 1 or sft_cfg.nproc_per_node > 1 or sft_cfg.deepspeed != "none":
        if any(ch.isspace() for ch in str(yaml_path)):  # llamafactory splits the torchrun line on spaces
            raise UsageError(f"{yaml_path}: a multi-process launch needs a path without spaces")
        if not 0 <= sft_cfg.node_rank < sft_cfg.nnodes:
            raise UsageError(f"sft.node_rank must be in [0, {sft_cfg.nnodes}), got {sft_cfg.node_rank}")
        env.update(
            FORCE_TORCHRUN="1",
            NNODES=str(sft_cfg.nnodes),
            NODE_RANK=str(sft_cfg.node_rank),
            MASTER_ADDR=sft_cfg.master_addr,
            MASTER_PORT=str(sft_cfg.master_port),
            NPROC_PER_NODE=str(sft_cfg.nproc_per_node),
        )
        return Command("llamafactory-cli train", (cli_path(), "train", str(yaml_path)), env)
    if sft_cfg.use_cpu:  # the same trainer, in one process, with logits only at labelled positions
        if importlib.util.find_spec("llamafactory") is None:
            raise StageFailed(MISSING)
        return Command(
            "llamafactory train", (sys.executable, "-m", LABELLED_LOGITS_ENTRY, str(yaml_path)), env
        )
    return Command("llamafactory-cli train", (cli_path(), "train", str(yaml_path)), env)


def export_command(yaml_path: Path, *, model_path: str | Path) -> Command:
    return Command("llamafactory-cli export", (cli_path(), "export", str(yaml_path)), engine_env(model_path))


def engine_env(model_path: str | Path) -> dict[str, str]:
    """Environment for ``llamafactory-cli``: offline unless the model is a Hub id it must fetch."""
    env = {"TOKENIZERS_PARALLELISM": "false"}
    if not is_hub_id(str(model_path)):
        env["HF_HUB_OFFLINE"] = "1"
    return env


def cli_path() -> str:
    """``llamafactory-cli`` of this Python environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / "llamafactory-cli"
    found = str(beside) if beside.exists() else shutil.which("llamafactory-cli")
    if not found:
        raise StageFailed(MISSING)
    return found


def yaml_text(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False)


def _template_key(template: str) -> dict:
    """LLaMA-Factory's ``template`` setting for ``model.template``; none for ``auto``, so that it parses
    the tokenizer's own chat template."""
    name = llamafactory_template(template)
    return {} if name is None else {"template": name}
