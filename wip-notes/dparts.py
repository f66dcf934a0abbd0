import re
import sys
from helpers import depth
from helpers.step import _probe, step_config
from helpers.models import resolve_model
config = step_config(sys.argv[1], 1, 224, "profile_step", **eval(sys.argv[2]))
spec = resolve_model(config.model, config.num_classes, config.name)
p = _probe(config, spec, 7)
log, storages, markers = depth.concrete(p)
items = depth._items(log, markers)
labs = depth.labels(p, items, markers)
labs = [depth.virtual(b, 7) for b in labs]; shape = depth.parts(labs, 5)
def show(it, lab):
    if it[0] == "m":
        pos, kind, payload = markers[it[1]]; return f"[{lab}] M {kind} {payload and payload[:2]}"
    st = storages[it[1]]
    return f"[{lab}] {it[0]} s{it[1]} {it[2]} {st[0]} {st[1]} {st[2]} owner={p.owners.get(it[1])} parent={p.parents.get(it[1])}"
for part in shape:
    if part.zigzag:
        for sweep in part.mids:
            ranges = sweep
            if len(set(b - a for a, b in ranges)) > 1:
                a1, b1 = ranges[0]; a2, b2 = ranges[1]
                A = [show(items[k], labs[k]) for k in range(a1, b1)]
                B = [show(items[k], labs[k]) for k in range(a2, b2)]
                import difflib
                norm = lambda L: [re.sub(r"layers\.\d+", "layers.X", re.sub(r"^\[\d+\] ", "", re.sub(r" s\d+", "", re.sub(r" (owner|parent)=\S+", "", x)))) for x in L]
                for line in difflib.unified_diff(norm(A), norm(B), lineterm="", n=4):
                    print(line)
                print("---- full A around diff"); 
                sys.exit()
