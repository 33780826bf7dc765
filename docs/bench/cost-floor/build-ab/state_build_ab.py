"""Development script (outside the package): time one srformer layer's no-grad state build at k=4096, s=64,
batch 8, 8 heads, d=64 (5 calls; min and median). ``save`` stores the state, ``check`` compares with it, ``--prof``
prints a torch.profiler table. Run it with PYTHONPATH pointing at two checkouts to compare them."""
import sys, time, torch
from srformer.config import SRformerConfig
from srformer.attention.variants import build_cross_attention
B,k,H,d,s = 8,4096,8,64,64
torch.manual_seed(0)
cfg = SRformerConfig(variant="srformer", segment_size=s, target_length=64, raf_linear_init_scale=1.0, raf_threshold_init=0.05)
mod = build_cross_attention(cfg, d, 1.0).eval()
x = torch.randn(B,k,H*d); y = torch.randn(B,k,H*d)
keys = x.view(B,k,H,d).transpose(1,2); values = y.view(B,k,H,d).transpose(1,2)
def run():
    with torch.no_grad():
        return mod.init_state(keys, values, None)
st = run()
if len(sys.argv) > 1 and sys.argv[1] == "save":
    torch.save({"readout": st.raf_readout, "norm": st.key_norm, "total": st.raf_total}, "/work/scratch/build_ref.pt")
elif len(sys.argv) > 1 and sys.argv[1] == "check":
    ref = torch.load("/work/scratch/build_ref.pt")
    print("readout equal:", torch.equal(ref["readout"], st.raf_readout), (ref["readout"]-st.raf_readout).abs().max().item(),
          "norm equal:", torch.equal(ref["norm"], st.key_norm), "total equal:", torch.equal(ref["total"], st.raf_total))
    print("fired fraction", (st.raf_readout > 0).float().mean().item())
ts = []
for _ in range(5):
    t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
print("init_state ms: min %.1f median %.1f" % (min(ts)*1e3, sorted(ts)[2]*1e3))
if "--prof" in sys.argv:
    with torch.profiler.profile() as p:
        run()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
