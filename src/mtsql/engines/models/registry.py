"""Model names to local folders under ``home_dir()/models``: the aliases (built offline on first use),
Hugging Face Hub ids (fetched once), local folders (as they are).

    resolve_model("smollm2-135m")   # pulls and converts on first use, then returns the folder
    resolve_model("tiny-qwen3")     # builds the random tiny Qwen3 on first use
                                    # (also tiny-qwen25, tiny-llama3, tiny-smollm2)
    resolve_model("Qwen/Qwen3-1.7B")  # an HF Hub id is downloaded once, then its folder is returned

A Hub model is fetched with ``huggingface_hub.snapshot_download`` into ``models/org--name``, so every
engine (LLaMA-Factory, verl, vLLM) gets a local folder and can run offline. Every alias folder is
built in a temporary sibling, checked (``verify_model``) and renamed when complete, so a folder that
exists is a finished one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from mtsql.base.artifacts import MODEL_DIR
from mtsql.base.errors import MtsqlError, UsageError
from mtsql.base.paths import home_dir
from mtsql.core.chat_format import ChatFormat
from mtsql.engines.models import smollm2, tiny_llama3, tiny_qwen3, tiny_smollm2

ROUND_TRIP_TEXT = "Hello world!  SELECT name FROM singer WHERE age > 30;\n\tcafé 😀 <|im_end|>"
INFO_FILE = "mtsql_model.json"
# How an alias is built; a cached folder of an older recipe is rebuilt. tiny-qwen3 2: head_dim 32, the
# smallest vLLM's CPU attention runs (it refused 16).
RECIPES = {"tiny-qwen3": 2}
TEMPLATE_OF = {
    "tiny-qwen25": "qwen",
    "tiny-llama3": "llama3",  # an alias's chat family (else qwen3_nothink)
    "tiny-smollm2": "smollm2",
}


def models_dir() -> Path:
    return home_dir() / "models"


def model_dir(alias: str) -> Path:
    return models_dir() / alias


def pull(alias: str = "smollm2-135m", force: bool = False) -> Path:
    """Download and convert a downloadable model alias; instant when already cached."""
    if alias not in _PULLABLE:
        raise UsageError(f"cannot pull '{alias}': pullable models are {', '.join(_PULLABLE)}")
    return _ensure(alias, _PULLABLE[alias], force)


def make_tiny(family: str = "qwen3", force: bool = False) -> Path:
    """Build (or find) the random-init tiny model of ``family`` (``qwen3``, ``qwen25``, ``llama3`` or
    ``smollm2``)."""
    alias = f"tiny-{family}"
    if alias not in _MAKEABLE:
        raise UsageError(
            f"no tiny model for '{family}': choose {', '.join(a.removeprefix('tiny-') for a in _MAKEABLE)}"
        )
    return _ensure(alias, _MAKEABLE[alias], force)


def resolve_model(name: str) -> Path:
    """The local folder of a model: an alias's cached folder (built on first use), a folder as it
    is, or an HF Hub id's download (fetched on first use)."""
    if name in _PULLABLE:
        return pull(name)
    if name in _MAKEABLE:
        return make_tiny(name.removeprefix("tiny-"))
    return fetch_hub_model(name) if is_hub_id(name) else model_folder(name)


def model_folder(name: str) -> Path:
    """The folder ``resolve_model(name)`` returns, without building or downloading anything (what a
    dry run shows)."""
    if name in _PULLABLE or name in _MAKEABLE:
        return model_dir(name)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise UsageError(f"model folder {path} has no config.json: not a Hugging Face model folder")
        return path.resolve()
    if is_hub_id(name):
        return hub_model_dir(name)
    known = ", ".join([*_PULLABLE, *_MAKEABLE])
    raise UsageError(
        f"model '{name}' is neither a folder that exists, an HF id (org/name), nor one of {known}"
    )


def local_model_folder(name: str) -> Path | None:
    """The folder of ``name`` when it is a model folder of the user's (not an alias mtsql builds, not a
    Hub download, whose content its name fixes); None otherwise."""
    if name in _PULLABLE or name in _MAKEABLE or is_hub_id(name):
        return None
    path = Path(name).expanduser()
    return path.resolve() if path.is_dir() else None


def model_context(name: str) -> int | None:
    """How many tokens model ``name``'s context holds, without building or fetching anything: its folder's
    ``max_position_embeddings`` (stretched by a RoPE scaling factor), else the recipe's value of an alias not
    built yet; None where that cannot be read (a Hub model not fetched yet, a folder without a config)."""
    try:
        config = json.loads((model_folder(name) / "config.json").read_text())
    except (UsageError, OSError, ValueError):
        return _RECIPE_CONTEXT.get(name)
    config = config.get("text_config", config) if isinstance(config, dict) else None
    length = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if type(length) is not int or length < 1:
        return None
    rope = config.get("rope_scaling")
    factor = rope.get("factor") if isinstance(rope, dict) else None
    if type(factor) in (int, float) and factor > 1:  # as vLLM derives its max_model_len
        original = rope.get("original_max_position_embeddings")
        length = max(length, int((original if type(original) is int else length) * factor))
    return length


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def is_hub_id(name: str) -> bool:
    """Whether ``name`` reads as a Hugging Face Hub id (``org/name``) and is no existing path."""
    return bool(_HUB_ID.fullmatch(name)) and not Path(name).exists()


def hub_model_dir(repo_id: str) -> Path:
    """Where a Hub model is kept: ``models/<org>--<name>``."""
    return models_dir() / repo_id.replace("/", "--")


def fetch_hub_model(repo_id: str) -> Path:
    """The folder of Hub model ``repo_id``, downloaded on first use (into ``<folder>.partial``,
    renamed when complete, so an interrupted download resumes and a folder that exists is whole)."""
    dest = hub_model_dir(repo_id)
    if dest.is_dir():
        return dest
    import httpx
    from huggingface_hub import snapshot_download

    partial = dest.with_name(dest.name + ".partial")
    try:
        snapshot_download(repo_id=repo_id, local_dir=partial)
    except (OSError, ValueError, httpx.HTTPError) as exc:  # offline, unreachable, unknown or gated repo
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UsageError(
            f"cannot fetch model '{repo_id}' from the Hugging Face Hub ({type(exc).__name__}: {reason}); "
            "run once where the Hub is reachable (HF_TOKEN for a gated model, HF_ENDPOINT for a "
            "mirror), or set model.name to a local model folder"
        ) from None
    missing = missing_model_files(partial)
    if missing:
        raise UsageError(
            f"the download of '{repo_id}' in {partial} lacks {', '.join(missing)}; "
            "delete that folder and fetch again where the Hub is reachable"
        )
    os.replace(partial, dest)
    return dest


def missing_model_files(folder: Path) -> list[str]:
    """What a Hugging Face model folder lacks: its config, or weights (every shard an index names)."""
    folder = Path(folder)
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    indexes = sorted(folder.glob("*.index.json"))
    if indexes:
        shards = set(json.loads(indexes[0].read_text()).get("weight_map", {}).values())
        missing += sorted(s for s in shards if not (folder / s).is_file())
    elif not any(folder.glob("*.safetensors")) and not any(folder.glob("pytorch_model*.bin")):
        missing.append("weights (*.safetensors)")
    return missing


def stage_model(base: str, trained=None, *, resolve: bool = True) -> str:
    """The model a stage loads: the ``model/`` folder of a training artifact ``trained``, else the
    base model's local folder (built or downloaded on first use; with ``resolve`` off, as in a dry
    run, only the folder it will be)."""
    if trained is not None:
        return str(Path(trained.path) / MODEL_DIR)
    return str(resolve_model(base) if resolve else model_folder(base))


def list_models() -> list[dict]:
    """Every known alias with its folder, whether it is built, and its size on disk."""
    rows = []
    for alias in [*_PULLABLE, *_MAKEABLE]:
        folder = model_dir(alias)
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0
        rows.append({"alias": alias, "path": str(folder), "present": folder.exists(), "bytes": size})
    return rows


# ---------------------------------------------------------------------------------------------
# Building a folder atomically


def _ensure(alias: str, build: Callable[[Path], dict], force: bool) -> Path:
    """The alias's folder, built (or rebuilt, when ``RECIPES`` has changed since) if needed."""
    dest = model_dir(alias)
    if dest.exists() and not force and _recipe_of(dest) == RECIPES.get(alias, 1):
        missing = missing_model_files(dest)
        if missing:
            how = (
                f"mtsql models make-tiny {alias.removeprefix('tiny-')}"
                if alias in _MAKEABLE
                else f"mtsql models pull {alias}"
            )
            raise UsageError(
                f"model folder {dest}: file missing: {', '.join(missing)} (deleted?); rebuild it with "
                f"`{how} --force`"
            )
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{alias}.", dir=dest.parent))
    try:
        info = build(tmp)
        info["alias"], info["recipe"] = alias, RECIPES.get(alias, 1)
        verify_model(tmp, TEMPLATE_OF.get(alias, "qwen3_nothink"))
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        tmp.chmod(0o755)  # mkdtemp made it private
        if dest.exists():  # force: replace the old folder
            shutil.rmtree(dest)
        try:
            os.replace(tmp, dest)
        except OSError:
            if not dest.exists():
                raise
            # another process finished the same build first: keep its folder
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest


def _recipe_of(folder: Path) -> int | None:
    try:
        return json.loads((folder / INFO_FILE).read_text()).get("recipe", 1)
    except (OSError, ValueError, AttributeError):
        return None


def verify_model(folder: Path, template: str = "qwen3_nothink") -> None:
    """Fail unless the tokenizer round-trips text, its chat template renders ``template``'s format and the
    model answers a chat prompt greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    decoded = tokenizer.decode(ids)
    if decoded != ROUND_TRIP_TEXT:
        raise MtsqlError(f"{folder}: tokenizer does not round-trip text ({ROUND_TRIP_TEXT!r} -> {decoded!r})")
    chat = ChatFormat(tokenizer, template)
    prompt = chat.prompt_ids([{"role": "user", "content": "Say hello."}])
    if chat.render_ids([{"role": "user", "content": "Say hello."}]) != tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hello."}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    ):
        raise MtsqlError(f"{folder}: the tokenizer's chat template disagrees with mtsql.core.chat_format")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
        )
    if out.shape[1] <= len(prompt):
        raise MtsqlError(f"{folder}: the model generated nothing for a chat prompt")


_PULLABLE: dict[str, Callable[[Path], dict]] = {"smollm2-135m": smollm2.build}
_MAKEABLE: dict[str, Callable[[Path], dict]] = {
    "tiny-qwen3": tiny_qwen3.build,
    "tiny-qwen25": tiny_qwen3.build_qwen25,
    "tiny-llama3": tiny_llama3.build,
    "tiny-smollm2": tiny_smollm2.build,
}
_RECIPE_CONTEXT = {
    "smollm2-135m": smollm2.CONTEXT,
    "tiny-qwen3": tiny_qwen3.CONTEXT,  # before it is built
    "tiny-qwen25": tiny_qwen3.CONTEXT,
    "tiny-llama3": tiny_llama3.CONTEXT,
    "tiny-smollm2": smollm2.CONTEXT,
}
