"""The engine's correctness checked on a device: greedy equality and losslessness at temperature 1.

* :func:`greedy_equality` -- greedy speculative decoding equals greedy autoregressive decoding
  on the device, with the test suite's tiny random Llama models (:mod:`specdec.engine.tinymodels`),
  a model drafter and a prompt-lookup drafter, float32.
* :func:`first_two_token_test` -- losslessness at temperature 1 on the device: Pearson's
  chi-square (:func:`specdec.theory.chisquare.chi_square_pvalue`) of the joint law of the first
  two tokens of N speculative runs against the target's exact law (:func:`exact_two_token_law`),
  as ``tests/test_decoding.py`` does on the CPU.
* :func:`preflight` and :func:`graph_smoke` -- before the real-weights GPU run
  (``specdec run gpu-real --check-payload``): its modules importable, the device, and a tiny random
  Llama's CUDA-graph replays and greedy speculative decoding against eager and plain.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from specdec.theory.chisquare import chi_square_pvalue
from specdec.theory.tokens import first_divergence

__all__ = [
    "PROMPTS",
    "RUN_MODULES",
    "exact_two_token_law",
    "first_two_token_test",
    "graph_smoke",
    "greedy_equality",
    "preflight",
]


#: The prompts of tests/test_decoding.py (the last one repeats an n-gram: prompt lookup drafts).
PROMPTS = ([7], [3, 14, 15, 92, 65], [11, 22, 33, 44, 11, 22, 33, 55, 66, 11, 22, 33])


def greedy_equality(
    device: str,
    *,
    prompts: Sequence[Sequence[int]] = PROMPTS,
    gamma: int = 3,
    max_new_tokens: int = 20,
) -> dict[str, Any]:
    """Greedy speculative == greedy autoregressive on ``device`` (float32, tiny random Llamas).

    The target is ``tiny_llama(0)``; the drafters a perturbed copy of it (noise 0.05, alpha ~ 0.8:
    both rejections and full accepts) and prompt lookup. The models are built on the CPU with
    the test suite's seeds and then moved, so they are the tests' models. Also recorded: whether
    the device's greedy tokens equal the CPU's (information: different kernels may break a
    near-tie), and the largest difference between the logits of one k-token forward and of k
    one-token forwards (what verification sees against what plain decoding sees).
    """
    import torch

    from specdec.drafting.registry import DraftContext, build_drafter
    from specdec.engine import tinymodels as tm
    from specdec.engine.decoding import autoregressive, speculative
    from specdec.engine.lm import CachedLM

    cpu_target = tm.tiny_llama(0)
    target = tm.tiny_llama(0).to(device)
    draft = tm.perturbed_copy(tm.tiny_llama(0), 0.05, 5).to(device)
    context = DraftContext(target, load_draft=lambda name: draft)
    drafters = {"model": build_drafter("draft:perturbed", context), "prompt-lookup": build_drafter("lookup")}
    runs = []
    for prompt in prompts:
        ar = autoregressive(target, list(prompt), max_new_tokens=max_new_tokens)
        cpu = autoregressive(cpu_target, list(prompt), max_new_tokens=max_new_tokens)
        row: dict[str, Any] = {
            "prompt": list(prompt),
            "autoregressive": ar.tokens,
            "matches_cpu": ar.tokens == cpu.tokens,
            "drafters": {},
        }
        for name, drafter in drafters.items():
            sp = speculative(target, drafter, list(prompt), gamma=gamma, max_new_tokens=max_new_tokens)
            row["drafters"][name] = {
                "equal": sp.tokens == ar.tokens,
                "first_difference": first_divergence(sp.tokens, ar.tokens),
                "new_tokens": len(sp.tokens),
                "rounds": sp.stats.rounds,
                "accepted_hist": sp.stats.accepted_hist,
            }
        runs.append(row)

    # One forward over k tokens against k single-token forwards, same cache, same positions.
    ids = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43]
    block, step = CachedLM(target), CachedLM(target)
    block.forward(ids[:4])
    step.forward(ids[:4])
    rows_block = block.forward(ids[4:])
    rows_step = torch.cat([step.forward([t]) for t in ids[4:]])
    diff = float((rows_block - rows_step).abs().max().cpu())
    all_equal = all(d["equal"] for r in runs for d in r["drafters"].values())
    return {
        "dtype": "float32",
        "gamma": gamma,
        "max_new_tokens": max_new_tokens,
        "all_equal": all_equal,
        "all_match_cpu": all(r["matches_cpu"] for r in runs),
        "block_vs_step_logits_max_abs_diff": diff,
        "runs": runs,
    }


def exact_two_token_law(model: Any, prefix: Sequence[int], **warp_kw: Any) -> np.ndarray:
    """P(x1, x2 | prefix) of ``model`` under ``warp`` from full (uncached) forwards, float64 (V, V)."""
    import torch

    from specdec.engine.lm import vocab_size
    from specdec.theory.sampling import warp

    device = next(model.parameters()).device
    vocab = vocab_size(model)
    with torch.inference_mode():
        first = torch.tensor([list(prefix)], dtype=torch.long, device=device)
        p1 = warp(model(input_ids=first, use_cache=False).logits[:, -1].float(), **warp_kw)[0].double()
        second = torch.tensor([[*prefix, x] for x in range(vocab)], dtype=torch.long, device=device)
        p2 = warp(model(input_ids=second, use_cache=False).logits[:, -1].float(), **warp_kw).double()
    law = (p1[:, None] * p2).cpu().numpy()
    return law / law.sum()


def first_two_token_test(
    device: str,
    *,
    n: int = 3000,
    time_cap_s: float = 45.0,
    gamma: int = 2,
    prefix: Sequence[int] = (36,),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Losslessness on ``device``: the first two tokens of speculative runs at temperature 1.

    The target is the one-layer ``tiny_llama(0, layers=1)``, the drafter a perturbed copy (noise
    0.3, alpha about 0.6 after the prefix [36]) -- the "model-gamma2" case of the test suite.
    Runs use seeds 0, 1, ... until ``n`` runs or ``time_cap_s`` seconds (a stopping rule that
    does not look at the outcomes), then the counts are tested against the exact law. The test
    suite passes at p > 1e-3.
    """
    from specdec.drafting.registry import DraftContext, build_drafter
    from specdec.engine import tinymodels as tm
    from specdec.engine.decoding import speculative

    target = tm.tiny_llama(0, layers=1).to(device)
    draft = tm.perturbed_copy(tm.tiny_llama(0, layers=1), 0.3, 7).to(device)
    drafter = build_drafter("draft:perturbed", DraftContext(target, load_draft=lambda name: draft))
    vocab = tm.VOCAB
    counts = np.zeros((vocab, vocab))
    accepted = examined = 0
    start = time.monotonic()
    runs = 0
    while runs < n and time.monotonic() - start < time_cap_s:
        gen = speculative(
            target, drafter, list(prefix), gamma=gamma, max_new_tokens=gamma + 1, temperature=1.0, seed=runs
        )
        counts[gen.tokens[0], gen.tokens[1]] += 1
        accepted += gen.stats.accepted_tokens
        examined += gen.stats.examined
        runs += 1
        if progress is not None and runs % 500 == 0:
            progress(f"  chi-square: {runs} runs in {time.monotonic() - start:.1f} s")
    elapsed = time.monotonic() - start
    law = exact_two_token_law(target, prefix, temperature=1.0)
    test = chi_square_pvalue(counts, law)
    return {
        "case": "model drafter (tiny_llama(0, layers=1) + 0.3 noise), temperature 1",
        "prefix": list(prefix),
        "gamma": gamma,
        "runs": runs,
        "runs_asked": n,
        "stopped_by_time_cap": runs < n,
        "elapsed_s": elapsed,
        "ms_per_run": 1e3 * elapsed / max(runs, 1),
        "alpha_accept_rate": accepted / examined if examined else None,
        "pass_threshold": 1e-3,
        "passed": test["pvalue"] > 1e-3,
        **test,
    }


# -- before a device run: the imports, the device, a CUDA graph -------------------------------------


#: The modules the run imports (what :func:`preflight` checks on the device); the run program itself
#: (:mod:`specdec.experiments.gpureal`, a layer above) is imported by its command before the preflight.
RUN_MODULES = (
    "torch",
    "numpy",
    "specdec.measure.gpupayload",
    "specdec.engine.builder",
    "specdec.engine.staticllama",
    "specdec.measure.gpusummary",
    "specdec.engine.decoding",
    "specdec.engine.drafters",
    "specdec.drafting.registry",
)


def preflight(device: str) -> dict[str, Any]:
    """What the run will find: its modules importable, the device, transformers (optional)."""
    import importlib

    out: dict[str, Any] = {}
    for name in RUN_MODULES:
        try:
            importlib.import_module(name)
            out[name] = "ok"
        except Exception as exc:  # noqa: BLE001  (reported, not raised: this is a check)
            out[name] = f"{type(exc).__name__}: {exc}"
    try:
        import transformers

        out["transformers"] = transformers.__version__
    except Exception as exc:  # noqa: BLE001
        out["transformers"] = f"not importable ({type(exc).__name__}); the run skips hf_check"
    import torch

    out["torch_version"] = torch.__version__
    out["cuda_available"] = torch.cuda.is_available()
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        out["device_name"] = torch.cuda.get_device_name(torch.device(device))
    return out


def graph_smoke(device: str) -> dict[str, Any]:
    """A tiny random Llama in the run's engine on ``device``: graph replays against eager calls,
    and greedy speculative decoding (an early-exit drafter) against plain, through the graphs
    where the device has them. Seconds; reported, never raised (it is a check)."""
    import torch

    from specdec.drafting.registry import DraftContext, build_drafter
    from specdec.engine.builder import EngineSpec, open_weights
    from specdec.engine.decoding import autoregressive, speculative

    out: dict[str, Any] = {"device": device}
    try:
        cfg = {
            "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "max_position_embeddings": 256,
        }  # fmt: skip
        gen = torch.Generator().manual_seed(0)
        shapes = {
            "model.embed_tokens.weight": (256, 64), "model.norm.weight": (64,),
            **{f"model.layers.{i}.{n}": s for i in range(2) for n, s in (
                ("input_layernorm.weight", (64,)), ("post_attention_layernorm.weight", (64,)),
                ("self_attn.q_proj.weight", (64, 64)), ("self_attn.k_proj.weight", (32, 64)),
                ("self_attn.v_proj.weight", (32, 64)), ("self_attn.o_proj.weight", (64, 64)),
                ("mlp.gate_proj.weight", (128, 64)), ("mlp.up_proj.weight", (128, 64)),
                ("mlp.down_proj.weight", (64, 128)),
            )},
        }  # fmt: skip
        weights = {
            n: torch.randn(s, generator=gen) * (1.0 if len(s) == 1 else 0.3) for n, s in shapes.items()
        }
        spec = EngineSpec("static", "float32", torch.get_num_threads(), device=device)
        target = open_weights(weights, cfg, spec, capacity=64).model
        early = target.early_exit(1)  # the view the registry's early-exit:1 drafter runs
        prompt = torch.randint(0, 256, (9,), generator=gen).tolist()
        if torch.device(device).type == "cuda":
            target.capture(range(1, 5))
            early.capture((1, 2))
            s = target.session()
            s.forward(prompt)
            s.crop(5)
            eager = s.forward(prompt[5:])
            target.use_graphs = True
            s.crop(5)
            out["graph_equals_eager"] = bool(torch.equal(s.forward(prompt[5:]), eager))
            target.use_graphs = early.use_graphs = True
        else:
            out["graph_equals_eager"] = f"skipped: no CUDA graphs on {device}"
        calls = target.graph_calls
        plain = autoregressive(target, prompt, max_new_tokens=12).tokens
        drafter = build_drafter("early-exit:1", DraftContext(target))
        spec = speculative(target, drafter, prompt, gamma=3, max_new_tokens=12).tokens
        out["greedy_speculative_equals_plain"] = spec == plain
        out["graph_calls"] = target.graph_calls - calls
        out["ok"] = out["greedy_speculative_equals_plain"] and out["graph_equals_eager"] is not False
    except Exception as exc:  # noqa: BLE001  (reported: the session decides whether to run)
        out["ok"] = False
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


# --------------------------------------------------------------------------- costs
