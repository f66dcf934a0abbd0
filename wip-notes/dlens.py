import sys, re
from helpers import depth
from helpers.step import _probe, step_config
from helpers.models import resolve_model
config = step_config(sys.argv[1], 1, 224, "profile_step", **eval(sys.argv[2]))
spec = resolve_model(config.model, config.num_classes, config.name)
res = {}
for d in (6, 7):
    p = _probe(config, spec, d)
    log, storages, markers = depth.concrete(p)
    items = depth._items(log, markers)
    real = depth.labels(p, items, markers)
    labs = [depth.virtual(b, d) for b in real]
    shape = depth.parts(labs, depth.virtual_depth(d))
    print(d, [(pt.zigzag, [b-a for a,b in pt.ends], [[b-a for a,b in s] for s in pt.mids]) for pt in shape])
    res[d] = (p, items, real, shape, storages, markers)
# print the first mid of each sweep for both depths, normalized
def show(p, it, lab, storages, markers):
    if it[0] == "m":
        pos, kind, payload = markers[it[1]]; return re.sub(r"layers\.\d+", "layers.X", f"M {kind} {payload and payload[:2]}")
    st = storages[it[1]]
    return f"{it[0]} {it[2]} {st[0]} {st[1]} {st[2]}"
import difflib
P6, P7 = res[6], res[7]
for pi, (a, b) in enumerate(zip(P6[3], P7[3])):
    if not a.zigzag: continue
    for si, (s6, s7) in enumerate(zip(a.mids, b.mids)):
        r6, r7 = s6[0], s7[0]
        A = [show(P6[0], P6[1][k], P6[2][k], P6[4], P6[5]) for k in range(*r6)]
        B = [show(P7[0], P7[1][k], P7[2][k], P7[4], P7[5]) for k in range(*r7)]
        if A != B:
            print("part", pi, "sweep", si)
            for line in difflib.unified_diff(A, B, lineterm="", n=3): print(line)
