"""Generation with transformers: batched, left-padded, per-prompt seeds, KV reuse across turns.

Imported only when the ``hf`` backend is made (``mtsql.engines.backends.make_backend``).

A call decodes its rows step by step (``_decode``, one model forward per step). ``_RowSampler``
picks each row's id greedily or draws it with the row's own ``torch.Generator`` (temperature,
top-p), so a row's continuation depends on its seed only, never on its neighbours in the batch; it
also records logprobs. ``_StopCriteria`` ends each row at an end-of-turn id or right after a stop
string. Rows that have ended leave the batch as soon as they are a quarter of it, so a call costs
what its live rows need, not what its longest row needs for all of them.

Multi-turn prompts repeat the whole conversation so far. With ``prefix_cache`` the backend keeps
each finished row's keys/values (prompt + continuation) until the conversation goes on or ends
(``forget``), and the opening new conversations share
(system prompt, tools, schema; see ``_PrefixCache``); when a later prompt extends one of them, it
computes only the new ids: first alone, row by row (no padding), all but the last new id;
then the batch starts from the last one, rows laid out ``[pad][cached ids][last id]`` with the
attention mask and positions (cumulative sum of the mask) skipping the pads. On CUDA, where one
forward per row costs more than padding, rows with a short new part skip the first pass and the
batch call prefills them together (``[pad][cached ids][pad][new ids]``). The batch cache is
preallocated (``_ReservedLayer``) and grouped-query models attend through ``_grouped_sdpa``, so no
decoding step copies the cache; only rows leaving the batch do.

The prefix cache may take ``PREFIX_CACHE_SHARE`` of the memory free at load (RAM on CPU), so it
holds every conversation in flight: an evicted one is computed again in full at its next message.
On CUDA, weights default to bfloat16 and a call's rows are bounded by free memory (``batch_limit``).
Transformers' own continuous batching (``generate_batch``, paged attention) is not used: it samples
with one random stream for the whole batch (no per-row seeds) and knows no stop strings. A decoding
step is one eager forward (about a thousand kernel launches at a 30-layer model), so where launches
are slow the next gain is CUDA graphs over a static cache, or vLLM.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Sequence
from pathlib import Path

import psutil
import torch
from safetensors import SafetensorError
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from mtsql.base.errors import UsageError
from mtsql.engines.backends.base import (
    Backend,
    Generation,
    SamplingParams,
    completes_stop_string,
    end_of_turn_ids,
)
from mtsql.engines.models.settings import resolve_dtype

GROUPED_SDPA = "mtsql_grouped_sdpa"
PREFIX_CACHE_SHARE = 0.3  # of the free memory at load (device or RAM), for the prefix cache
BATCH_MEMORY_SHARE = 0.8  # on CUDA: of the free memory, for one call's rows
CUDA_BATCHED_PREFILL = 256  # on CUDA: new ids a row may have to be prefilled in the batch call
MAX_BATCH_ROWS = 1024
MIN_SHARED = 64  # ids two new conversations must open with before their common keys/values are kept
MAX_SHARED = 16  # shared openings kept (least recently used dropped)
RECENT_NEW = 16  # earlier new conversations a new one is compared with for a common opening


class HFBackend(Backend):
    """A transformers causal LM on one device (CPU by default).

    ``dtype="auto"``: float32 on CPU, bfloat16 on CUDA (``models.settings.resolve_dtype``). The prefix
    cache keeps up to ``PREFIX_CACHE_SHARE`` of the free memory (``max_cached_tokens=None``). On CUDA the
    backend also sizes its own batches from free memory (``batch_limit``; a larger call is run in parts)
    and lets the batch call prefill rows whose new part has at most ``batched_prefill`` ids
    (default: ``CUDA_BATCHED_PREFILL`` on CUDA, 0 on CPU, where rows are prefilled alone, unpadded).
    """

    def __init__(
        self,
        model: str | Path,
        dtype: str = "auto",
        device: str = "cpu",
        prefix_cache: bool = True,
        max_cached_tokens: int | None = None,
        batched_prefill: int | None = None,
    ):
        cuda = torch.device(device).type == "cuda"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            self.model = AutoModelForCausalLM.from_pretrained(
                model, dtype=getattr(torch, resolve_dtype(dtype, device))
            ).to(device)
        except (
            OSError,
            ValueError,
            KeyError,
            SafetensorError,
        ) as exc:  # a missing, damaged or truncated file
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"cannot load '{model}' as a causal language model: {first}") from None
        self.model.eval()
        _use_grouped_sdpa(self.model)
        self.device, self.cuda = device, cuda
        self.batched_prefill = (
            (CUDA_BATCHED_PREFILL if cuda else 0) if batched_prefill is None else batched_prefill
        )
        self.end_of_turn_ids = end_of_turn_ids(self.tokenizer, self.model.generation_config.eos_token_id)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = min(self.end_of_turn_ids)
        self.memory = _MemoryModel.of(self.model)
        if max_cached_tokens is None:
            max_cached_tokens = int(PREFIX_CACHE_SHARE * _free_bytes(device) // self.memory.kv_per_token)
        self.cache = _PrefixCache(max_cached_tokens) if prefix_cache and self._cache_supported() else None
        self._stop_enders: dict[
            int, bool
        ] = {}  # id -> decodes to text holding a stop string's last character
        self._stop_enders_for: tuple[str, ...] = ()

    def forget(self, tokens: Sequence[int]) -> None:
        """Drop the kept keys/values of the conversation that ends at ``tokens`` (shared openings stay)."""
        if self.cache is not None:
            self.cache.drop_prefixes_of(tokens)

    @classmethod
    def options(cls, cfg, *, log_path: Path | None = None) -> dict:
        return {"dtype": cfg.model.dtype, "device": cfg.model.device}

    @classmethod
    def training_options(cls, cfg, *, dtype: str, log_path: Path | None = None) -> dict:
        """The trained model itself generates: it loads in the training ``dtype``."""
        return {"dtype": dtype, "device": cfg.model.device}

    def in_process_model(self):
        """The model this backend generates with: a trainer may train it in place."""
        return self.model

    def load_weights(self, model, folder: Path | None = None) -> None:
        """Generate with ``model`` itself from now on (shared, not copied: ``folder`` is not needed), e.g.
        the trainable wrapper of ``in_process_model``; the keys/values computed with the old weights go."""
        self.model = model
        self.clear_prefix_cache()

    def clear_prefix_cache(self) -> None:
        """Drop every kept key/value (frees memory; later prompts are computed in full)."""
        if self.cache is not None:
            self.cache = _PrefixCache(self.cache.max_tokens)

    def _cache_supported(self) -> bool:
        text_config = self.model.config.get_text_config(decoder=True)
        layer_types = getattr(text_config, "layer_types", None) or ["full_attention"]
        sliding = getattr(text_config, "use_sliding_window", False) and getattr(
            text_config, "sliding_window", None
        )
        return set(layer_types) == {"full_attention"} and not sliding

    def batch_limit(self, tokens_per_row: int) -> int | None:
        """On CUDA, the rows of ``tokens_per_row`` ids that fit the free memory now; None on CPU."""
        if not self.cuda:
            return None
        return rows_that_fit(_free_bytes(self.device), self.memory.row_bytes(tokens_per_row))

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        prompts, seeds = [list(p) for p in prompts], self._seeds(prompts, params, seeds)
        limit = self.batch_limit(max(map(len, prompts)) + params.max_new_tokens) or len(prompts)
        results = []
        for start in range(0, len(prompts), limit):  # rows are independent: parts give the same ids
            results += self._generate(prompts[start : start + limit], params, seeds[start : start + limit])
        return results

    def _generate(
        self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]
    ) -> list[Generation]:
        input_ids, attention_mask, past = self._batch(prompts, params.max_new_tokens)
        sampler = _RowSampler(params, seeds, self.device)
        stopper = _StopCriteria(self.tokenizer, self.end_of_turn_ids, params.stop, self._enders(params.stop))
        with torch.inference_mode():
            new, stopped = self._decode(
                prompts, input_ids, attention_mask, past, params.max_new_tokens, sampler, stopper
            )
        results = []
        for row, ids in enumerate(new):
            logprobs = sampler.logprobs[row][: len(ids)] if params.logprobs else None
            results.append(self._generation(ids, "stop" if row in stopped else "length", logprobs))
        return results

    def _decode(self, prompts, input_ids, attention_mask, past, max_new_tokens, sampler, stopper):
        """Generate for every row until it stops or has ``max_new_tokens`` ids; returns each row's ids
        and the rows that stopped. Finished rows leave the batch once they are a quarter of it (so
        later steps compute only live rows), together with the columns no remaining row attends to;
        each leaving row's keys/values go to the prefix cache."""
        rows, width = len(prompts), input_ids.shape[1]
        past = past if past is not None else self._empty_cache(rows, width + max_new_tokens)
        mask = torch.zeros((rows, width + max_new_tokens), dtype=attention_mask.dtype, device=self.device)
        mask[:, :width] = attention_mask
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        head = past.get_seq_length()
        feed, feed_positions = input_ids[:, head:], positions[:, head:]
        live = list(range(rows))  # the original row of each batch row
        new: list[list[int]] = [[] for _ in range(rows)]
        stopped: set[int] = set()
        start = 0  # columns dropped from the left
        for step in range(max_new_tokens):
            end = width + step - start
            logits = self.model(
                input_ids=feed,
                attention_mask=mask[:, :end],
                position_ids=feed_positions,
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,
            ).logits
            choice = sampler.pick(logits[:, -1].float(), live, skip=stopped)
            for row, token in zip(live, choice.tolist(), strict=True):
                if row not in stopped:
                    new[row].append(token)
                    if stopper.ends(new[row]):
                        stopped.add(row)
            done = [index for index, row in enumerate(live) if row in stopped]
            if len(done) == len(live) or step == max_new_tokens - 1:
                break
            mask[:, end] = 1
            feed, feed_positions = choice[:, None], mask[:, :end].sum(-1, keepdim=True)
            if len(done) * 4 >= len(live):
                self._remember_rows(prompts, new, [live[i] for i in done], done, mask, width - start, past)
                keep = torch.tensor(
                    [i for i in range(len(live)) if live[i] not in stopped], device=self.device
                )
                mask, first = _keep_rows(past, mask.index_select(0, keep), keep, end)
                start += first
                feed, feed_positions = feed.index_select(0, keep), feed_positions.index_select(0, keep)
                live = [live[i] for i in keep.tolist()]
        self._remember_rows(prompts, new, live, list(range(len(live))), mask, width - start, past)
        return new, stopped

    def _empty_cache(self, rows: int, capacity: int) -> DynamicCache:
        """A batch cache with room for ``capacity`` positions (a plain one, which transformers fills
        with the layer kinds it needs, for a model whose layers are not all full attention)."""
        if not self._cache_supported():
            return DynamicCache(config=self.model.config)
        config = self.model.config.get_text_config(decoder=True)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        cache = DynamicCache(config=self.model.config)
        cache.layers = [
            _ReservedLayer(
                *(
                    torch.zeros((rows, heads, capacity, head_dim), dtype=self.model.dtype, device=self.device)
                    for _ in range(2)
                ),
                0,
            )
            for _ in range(config.num_hidden_layers)
        ]
        return cache

    def _enders(self, stop: tuple[str, ...]) -> dict[int, bool] | None:
        """The memo of which ids can complete one of ``stop`` (None: check every id)."""
        if any(not s or s[-1].isspace() for s in stop):
            return None  # a decoder may drop a lone token's leading space: no shortcut
        if stop != self._stop_enders_for:
            self._stop_enders, self._stop_enders_for = {}, stop
        return self._stop_enders

    # -----------------------------------------------------------------------------------------
    # Batch layout and the prefix cache

    def _batch(self, prompts: list[list[int]], max_new_tokens: int):
        """(input_ids, attention_mask, cache or None) for left-padded prompts, reusing cached prefixes."""
        hits = [
            self._cached_part(p) for p in prompts
        ]  # one after another: a row may share what the last one kept
        cached = [len(h.tokens) if h else 0 for h in hits]
        head, tail = max(cached), max(len(p) - c for p, c in zip(prompts, cached, strict=True))
        ids, mask = [], []
        for prompt, c in zip(prompts, cached, strict=True):
            new = prompt[c:]
            ids.append([self.pad_id] * (head - c) + prompt[:c] + [self.pad_id] * (tail - len(new)) + new)
            mask.append([0] * (head - c) + [1] * c + [0] * (tail - len(new)) + [1] * len(new))
        input_ids = torch.tensor(ids, device=self.device)
        attention_mask = torch.tensor(mask, device=self.device)
        past = self._stack_cache(hits, head, capacity=head + tail + max_new_tokens) if head else None
        return input_ids, attention_mask, past

    def _cached_part(self, prompt: list[int]) -> _CachedPrefix | None:
        """Keys/values of ``prompt`` up to where the batch call takes over: the cache's longest prefix,
        extended alone by ``_prefill`` when the rest is longer than the batch call prefills."""
        if self.cache is None:
            return None
        hit = self.cache.take(prompt)
        if len(prompt) - (len(hit.tokens) if hit else 0) > max(1, self.batched_prefill):
            return self._prefill(prompt, hit)
        return hit

    def _prefill(self, prompt: list[int], hit: _CachedPrefix | None) -> _CachedPrefix:
        """Run ``prompt[:-1]`` past its cached part through the model alone; its keys/values as a prefix."""
        start = len(hit.tokens) if hit else 0
        past = DynamicCache(
            [(k[None], v[None]) for k, v in hit.layers] if hit else None, config=self.model.config
        )
        with torch.inference_mode():
            self.model(
                input_ids=torch.tensor([prompt[start:-1]], device=self.device),
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,
            )
        computed = _CachedPrefix(
            tuple(prompt[:-1]), [(layer.keys[0], layer.values[0]) for layer in past.layers]
        )
        if hit is None or hit.shared:  # a new conversation: its opening may be worth keeping for others
            self.cache.share(computed)
        return computed

    def _stack_cache(self, hits, length: int, capacity: int) -> DynamicCache:
        """A batch cache of ``length`` positions (room for ``capacity``), each row's cached part
        right-aligned."""
        template = next(h for h in hits if h)
        buffers = [
            [like.new_zeros((len(hits), like.shape[0], capacity, like.shape[2])) for like in pair]
            for pair in template.layers
        ]  # per layer keys and values, each [heads, positions, head_dim]
        targets, sources = [], []
        for row, hit in enumerate(hits):
            if hit is None:
                continue
            for pair, kept in zip(buffers, hit.layers, strict=True):
                for buffer, tensor in zip(pair, kept, strict=True):
                    targets.append(buffer[row, :, length - tensor.shape[1] : length])
                    sources.append(tensor)
        torch._foreach_copy_(targets, sources)  # every row and layer in one call, no Python loop of copies
        layers = [_ReservedLayer(keys, values, length) for keys, values in buffers]
        cache = DynamicCache(config=self.model.config)
        cache.layers = layers
        return cache

    def _remember_rows(self, prompts, new, rows, batch_rows, mask, prompt_width, past) -> None:
        """Keep the keys/values of each of ``rows`` (at ``batch_rows`` of the batch) for its prompt and
        the ids fed after it: all it generated but the last, never fed back."""
        if self.cache is None or not rows:
            return
        prompt_masks = mask[batch_rows, :prompt_width].tolist()  # one transfer for all rows
        for row, batch_row, prompt_mask in zip(rows, batch_rows, prompt_masks, strict=True):
            fed = new[row][:-1]
            columns = [c for c, seen in enumerate(prompt_mask) if seen] + list(
                range(prompt_width, prompt_width + len(fed))
            )
            index = torch.tensor(columns, device=self.device)
            # indexing with a tensor copies: the entry owns its keys/values
            layers = [
                (layer.keys[batch_row, :, index], layer.values[batch_row, :, index]) for layer in past.layers
            ]
            self.cache.put(prompts[row] + fed, layers)


def _keep_rows(
    past: DynamicCache, mask: torch.Tensor, rows: torch.Tensor, end: int
) -> tuple[torch.Tensor, int]:
    """Cut the batch cache to ``rows`` (``mask`` is already cut) and, when its layers are reserved,
    to the positions from the first column one of them attends to. Returns the mask without the
    dropped columns and how many were dropped."""
    if not all(isinstance(layer, _ReservedLayer) for layer in past.layers):
        past.batch_select_indices(rows)
        return mask, 0
    first = int(mask[:, :end].any(0).int().argmax())  # leading columns every kept row masks out
    for layer in past.layers:
        layer.keep(rows, first)
    return mask[:, first:], first


class _ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` that writes new keys/values into a preallocated buffer instead of
    concatenating the whole cache at every step. Past its capacity (or once transformers replaced
    its tensors) it concatenates like a plain ``DynamicLayer``."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.buffers = (keys, values)
        self._show(length)

    def _show(self, length: int) -> None:
        """Expose the first ``length`` positions of the buffers as the layer's keys/values."""
        self.keys, self.values = (buffer[..., :length, :] for buffer in self.buffers)
        self._shown = (self.keys, self.values)

    def update(self, key_states, value_states, *args, **kwargs):
        start = self.keys.shape[-2]
        end = start + key_states.shape[-2]
        # the tensors themselves, not their addresses: an empty view's address is not its buffer's
        replaced = self.keys is not self._shown[0] or self.values is not self._shown[1]
        if end > self.buffers[0].shape[-2] or replaced:
            return super().update(key_states, value_states, *args, **kwargs)
        self.buffers[0][..., start:end, :] = key_states
        self.buffers[1][..., start:end, :] = value_states
        self._show(end)
        return self.keys, self.values

    def keep(self, rows: torch.Tensor, first: int) -> None:
        """Keep only ``rows`` (batch indices) and the positions from ``first`` on, in new buffers."""
        length = self.keys.shape[-2]
        kept = []
        for buffer, current in zip(self.buffers, (self.keys, self.values), strict=True):
            fresh = buffer.new_empty((len(rows), buffer.shape[1], buffer.shape[2] - first, buffer.shape[3]))
            fresh[:, :, : length - first] = current[:, :, first:].index_select(0, rows)
            kept.append(fresh)
        self.buffers = tuple(kept)
        self._show(length - first)


def _grouped_sdpa(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs
):
    """Scaled dot-product attention for grouped-query models under a padding mask, without copies.

    Given a mask, transformers' ``sdpa`` copies every key/value head once per query head sharing it
    (the whole cache, per layer and step). Folding each group's query heads into the query length
    lets all of them attend to the shared key/value head as it is. Other cases go to ``sdpa``.
    """
    batch, heads, length, dim = query.shape
    groups = heads // key.shape[1]
    if (
        attention_mask is None
        or groups == 1
        or attention_mask.shape[1] != 1
        or dropout
        or kwargs.get("sliding_window")
        or kwargs.get("softcap")
    ):
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    folded = query.reshape(batch, key.shape[1], groups * length, dim)  # query head h = kv head h // groups
    out = torch.nn.functional.scaled_dot_product_attention(
        folded, key, value, attn_mask=attention_mask.repeat(1, 1, groups, 1), scale=scaling
    )
    return out.reshape(batch, heads, length, dim).transpose(1, 2).contiguous(), None


def _use_grouped_sdpa(model) -> None:
    """Switch an ``sdpa`` model to ``_grouped_sdpa`` (same masks, same results, no key/value copies)."""
    if model.config._attn_implementation != "sdpa":
        return
    AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)


class _CachedPrefix:
    """Keys/values of ``tokens`` (per layer, ``[heads, positions, head_dim]``); a ``shared`` one is
    an opening many conversations start with, read by each and never written."""

    __slots__ = ("tokens", "layers", "shared")

    def __init__(self, tokens: tuple[int, ...], layers: list, shared: bool = False):
        self.tokens, self.layers, self.shared = tokens, layers, shared


class _PrefixCache:
    """Finished sequences' keys/values, least recently stored evicted beyond ``max_tokens`` positions,
    and up to ``MAX_SHARED`` shared openings: when a new conversation begins with at least
    ``MIN_SHARED`` ids of one of the ``RECENT_NEW`` new ones before it (the system prompt, tool
    list, a database's schema), the keys/values of the longest such opening are kept, and later
    conversations start from them (within a quarter of ``max_tokens`` positions). Turns of one
    dialogue need not be neighbours for their schema to be shared."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.entries: OrderedDict[tuple[int, ...], _CachedPrefix] = OrderedDict()
        self.shared: OrderedDict[tuple[int, ...], _CachedPrefix] = OrderedDict()
        self.size = 0
        self.reused_tokens = 0  # prompt ids not recomputed thanks to the cache, over its lifetime
        self._recent_new: deque[tuple[int, ...]] = deque(maxlen=RECENT_NEW)

    def put(self, tokens: list[int], layers: list) -> None:
        key = tuple(tokens)
        if not key or key in self.entries or len(key) > self.max_tokens:
            return
        self.entries[key] = _CachedPrefix(key, layers)
        self.size += len(key)
        while self.size > self.max_tokens:
            old, _ = self.entries.popitem(last=False)
            self.size -= len(old)

    def drop_prefixes_of(self, tokens: Sequence[int]) -> None:
        """Remove the conversations' own entries that ``tokens`` continues (shared openings stay)."""
        for key in [k for k in self.entries if len(k) <= len(tokens) and tuple(tokens[: len(k)]) == k]:
            del self.entries[key]
            self.size -= len(key)

    def take(self, prompt: list[int]) -> _CachedPrefix | None:
        """The longest kept strict prefix of ``prompt``: a conversation's own, removed from the cache
        (a turn is continued once), or a shared opening, left in it."""
        best = None
        for key in (*self.entries, *self.shared):
            n = len(key)
            if (
                n < len(prompt)
                and (best is None or n > len(best))
                and key[-1] == prompt[n - 1]
                and tuple(prompt[:n]) == key
            ):
                best = key
        if best is None:
            return None
        self.reused_tokens += len(best)
        if best in self.shared:
            self.shared.move_to_end(best)
            return self.shared[best]
        self.size -= len(best)
        return self.entries.pop(best)

    def share(self, computed: _CachedPrefix) -> None:
        """Note a new conversation's computed prompt; keep the longest opening it has in common with
        a recent new one when that is long enough and not kept yet."""
        common = max(
            (len(os.path.commonprefix([earlier, computed.tokens])) for earlier in self._recent_new), default=0
        )
        self._recent_new.append(computed.tokens)
        key = computed.tokens[:common]
        if common < MIN_SHARED or key in self.shared or common > self.max_tokens:
            return
        layers = [(k[:, :common].clone(), v[:, :common].clone()) for k, v in computed.layers]
        self.shared[key] = _CachedPrefix(key, layers, shared=True)
        while len(self.shared) > MAX_SHARED or sum(map(len, self.shared)) > self.max_tokens // 4:
            self.shared.popitem(last=False)


class _RowSampler:
    """Picks each row's next id (argmax, or drawn with the row's own generator) and records its logprob."""

    def __init__(self, params: SamplingParams, seeds: list[int], device: str):
        self.params = params
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        self.logprobs: list[list[float]] = [[] for _ in seeds]

    def pick(
        self, scores: torch.Tensor, rows: list[int], skip: set[int] | frozenset[int] = frozenset()
    ) -> torch.Tensor:
        """One id per batch row from its float logits; ``rows`` are the rows' original indices, and
        rows in ``skip`` (finished, still in the batch) get the argmax without touching their draws."""
        params = self.params
        choice = scores.argmax(dim=-1)
        if params.temperature > 0:
            probs = torch.softmax(scores / params.temperature, dim=-1)
            if params.top_p < 1:
                probs = _top_p(probs, params.top_p)
            for index, row in enumerate(rows):
                if row not in skip:
                    choice[index] = torch.multinomial(probs[index], 1, generator=self.generators[row])[0]
        if params.logprobs:
            picked = torch.log_softmax(scores, dim=-1).gather(1, choice[:, None])[:, 0].tolist()
            for row, value in zip(rows, picked, strict=True):
                if row not in skip:
                    self.logprobs[row].append(value)
        return choice


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely ids whose mass reaches ``top_p``; renormalize."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)


class _StopCriteria:
    """Whether a row's ids end with an end-of-turn id or a completed stop string.

    A stop string can only be completed by an id whose text holds its last character, so only
    rows whose last id does (``enders``, a memo filled as ids come) are decoded."""

    def __init__(
        self, tokenizer, end_ids: frozenset[int], stop: tuple[str, ...], enders: dict[int, bool] | None = None
    ):
        self.tokenizer, self.end_ids, self.stop = tokenizer, end_ids, stop
        self.width = max((len(s) for s in stop), default=0)  # ids that can hold a stop string
        self.enders, self.last_chars = enders, {s[-1] for s in stop if s}

    def ends(self, ids: list[int]) -> bool:
        token = ids[-1]
        return token in self.end_ids or bool(
            self.stop
            and self._may_end(token)
            and completes_stop_string(self.tokenizer, ids[-self.width :], self.stop)
        )

    def _may_end(self, token: int) -> bool:
        if self.enders is None:
            return True
        if token not in self.enders:
            text = self.tokenizer.decode([token], skip_special_tokens=False)
            self.enders[token] = any(c in text for c in self.last_chars)
        return self.enders[token]


# ---------------------------------------------------------------------------------------------
# Memory arithmetic: how many rows one call can take (CUDA), how much the prefix cache may keep


class _MemoryModel:
    """Bytes a batch row needs per token: its keys/values (held twice: the batch's cache and the
    copy kept for the next turn), activations and attention mask of a batched prefill (at most
    ``CUDA_BATCHED_PREFILL`` query positions), and the last position's logits."""

    def __init__(self, kv_per_token: int, activation_per_token: int, logits_per_row: int):
        self.kv_per_token, self.activation_per_token, self.logits_per_row = (
            kv_per_token,
            activation_per_token,
            logits_per_row,
        )

    @classmethod
    def of(cls, model) -> _MemoryModel:
        config = model.config.get_text_config(decoder=True)
        width = torch.tensor([], dtype=model.dtype).element_size()
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        kv = 2 * config.num_hidden_layers * kv_heads * head_dim * width
        intermediate = getattr(config, "intermediate_size", None) or 4 * config.hidden_size
        activation = (
            4 * config.hidden_size + 2 * intermediate
        ) * width + CUDA_BATCHED_PREFILL * heads // kv_heads
        logits = 4 * config.vocab_size * 4  # float32 scores and the sampler's copies
        return cls(kv, activation, logits)

    def row_bytes(self, tokens: int) -> int:
        return tokens * (2 * self.kv_per_token + self.activation_per_token) + self.logits_per_row


def rows_that_fit(
    free_bytes: int, row_bytes: int, share: float = BATCH_MEMORY_SHARE, most: int = MAX_BATCH_ROWS
) -> int:
    """Rows of ``row_bytes`` in ``share`` of ``free_bytes``: at least 1, at most ``most``."""
    return max(1, min(most, int(free_bytes * share) // max(row_bytes, 1)))


def _free_bytes(device: str) -> int:
    """Memory a new allocation can use: on a CUDA device, free on the device plus what PyTorch's
    caching allocator holds unused; on CPU, the RAM available without swapping."""
    if torch.device(device).type != "cuda":
        return psutil.virtual_memory().available
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
