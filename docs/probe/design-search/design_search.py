"""Probe task design search (development script, not part of the package; see docs/probe.md). Run from the repo root.

Designs `sum` (the current recall design) and `pair` run against this commit's package; `fact` and `density` used the
fact tokens `K{q}=v{x}` (`ProbeVocabulary.fact_id`) of commit 2092cd0, which the package no longer has.
It repeats a minimal version of `srformer.probe.training.train_model` so that it can evaluate every few hundred steps.
"""
import argparse, math, random, sys, time, json
import torch
sys.path.insert(0, "src")
from srformer.probe.tasks import Example, ProbeVocabulary, TaskSpec, generate_example
from srformer.probe.training import ModelShape, build_model, curriculum_length
from srformer.probe.training import collate as _collate
def collate(ex, voc):
    b = _collate(ex, voc)
    if hasattr(ex[0], "extra"):
        ids = b.pop("input_ids")
        extra = torch.full_like(ids, -1)
        for i, e in enumerate(ex):
            extra[i, :len(e.extra)] = torch.tensor(e.extra)
        emb = model.get_input_embeddings()
        b["inputs_embeds"] = emb(ids) + emb(extra.clamp(min=0)) * (extra >= 0).unsqueeze(-1)
    return b

p = argparse.ArgumentParser()
p.add_argument("--design", default="pair")
p.add_argument("--steps", type=int, default=3000)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--start", type=int, default=64)
p.add_argument("--final", type=int, default=64)
p.add_argument("--hold", type=float, default=0.5)
p.add_argument("--ramp", type=float, default=0.3)
p.add_argument("--n", type=int, default=4)
p.add_argument("--keys", type=int, default=32)
p.add_argument("--values", type=int, default=16)
p.add_argument("--variant", default="full")
p.add_argument("--s", type=int, default=32)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--dmodel", type=int, default=128)
p.add_argument("--eval_every", type=int, default=250)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--density", type=int, default=16)
a = p.parse_args()

voc = ProbeVocabulary(num_keys=a.keys, num_values=a.values)

def pair_example(rng, n, length):
    src = rng.choices(voc.filler_ids, k=length)
    # non-overlapping pair slots
    picks = sorted(rng.sample(range(length - a.keys), a.keys))
    starts = [x + i for i, x in enumerate(picks)]
    order = list(range(a.keys)); rng.shuffle(order)
    pos = {}; vals = {}
    for key, st in zip(order, starts):
        v = rng.randrange(a.values)
        src[st] = voc.key_ids[key]; src[st + 1] = voc.value_ids[v]
        pos[key] = st + 1; vals[key] = v
    tgt, need, sc = [], [], []
    for key in sorted(rng.sample(range(a.keys), n)):
        tgt += [voc.key_ids[key], voc.value_ids[vals[key]]]; need += [(), (pos[key],)]; sc += [False, True]
    return Example(tuple(src), tuple(tgt), tuple(need), tuple(sc))

p2 = None
def fact_density(rng, n, length):
    D = max(n, min(a.keys, length // a.density))
    src = rng.choices(voc.filler_ids, k=length)
    keys = rng.sample(range(a.keys), D)
    pos = rng.sample(range(length), D)
    vals = {}
    for key, ps in zip(keys, pos):
        v = rng.randrange(a.values); vals[key] = (v, ps); src[ps] = voc.fact_id(key, v)
    tgt, need, sc = [], [], []
    for key in sorted(rng.sample(keys, n)):
        v, ps = vals[key]
        tgt += [voc.key_ids[key], voc.value_ids[v]]; need += [(), (ps,)]; sc += [False, True]
    return Example(tuple(src), tuple(tgt), tuple(need), tuple(sc))

def summed(rng, n, length):
    D = max(n, min(a.keys, length // a.density)) if a.density else a.keys
    src = rng.choices(voc.filler_ids, k=length)
    extra = [-1] * length
    keys = rng.sample(range(a.keys), D)
    pos = rng.sample(range(length), D)
    vals = {}
    for key, ps in zip(keys, pos):
        v = rng.randrange(a.values); vals[key] = (v, ps); src[ps] = voc.key_ids[key]; extra[ps] = voc.value_ids[v]
    tgt, need, sc = [], [], []
    for key in sorted(rng.sample(keys, n)):
        v, ps = vals[key]
        tgt += [voc.key_ids[key], voc.value_ids[v]]; need += [(), (ps,)]; sc += [False, True]
    e = Example(tuple(src), tuple(tgt), tuple(need), tuple(sc))
    object.__setattr__(e, "extra", extra)
    return e

def make(rng, length):
    if a.design == "sum":
        return summed(rng, a.n, length)
    if a.design == "density":
        return fact_density(rng, a.n, length)
    if a.design == "pair":
        return pair_example(rng, a.n, length)
    return generate_example(rng, TaskSpec("recall", a.n), voc, length=length, segment_size=a.s, target_length=2 * a.n + 1)

shape = ModelShape(d_model=a.dmodel, d_ff=4 * a.dmodel, num_layers=a.layers, num_decoder_layers=a.layers, d_kv=a.dmodel // 4)
model = build_model(voc, shape, a.seed)
if a.variant != "full":
    from srformer.config import named_config
    from srformer.models.convert import convert
    model = convert(model, named_config(a.variant, segment_size=a.s, target_length=max(2 * a.n + 1, -(-a.final // a.s))))
opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
warm = 100
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(0.1, 1 - 0.9 * (s - warm) / max(1, a.steps - warm))))
erng = random.Random(12345)
evals = [make(erng, a.final) for _ in range(256)]
evals_short = [make(erng, a.start) for _ in range(128)]

def evaluate(evals=evals):
    model.eval(); ok = tot = 0
    with torch.inference_mode():
        for i in range(0, len(evals), 64):
            ch = evals[i:i + 64]
            lg = model(**collate(ch, voc)).logits.argmax(-1).tolist()
            for row, e in zip(lg, ch):
                for j, s_ in enumerate(e.scored):
                    if s_:
                        tot += 1; ok += int(row[j] == e.target[j])
    model.train(); return ok / tot

t0 = time.time(); losses = []
for step in range(a.steps):
    L = curriculum_length(step, a.steps, start=min(a.start, a.final), final=a.final, ramp=a.ramp, hold=a.hold)
    rng = random.Random(f"{a.seed}:{step}")
    ex = [make(rng, L) for _ in range(a.batch)]
    loss = model(**collate(ex, voc)).loss
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); sched.step()
    losses.append(loss.item())
    if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
        print(json.dumps({"step": step + 1, "len": L, "loss": round(sum(losses[-50:]) / len(losses[-50:]), 3), "acc": round(evaluate(), 3), "acc_short": round(evaluate(evals_short), 3), "sec": round(time.time() - t0)}), flush=True)
