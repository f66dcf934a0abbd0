import time, sys
from helpers.step import profile_step
def cmp(a, b):
    la = [(x.serial, x.kind, x.nbytes, x.category, x.event) for x in a.allocation_log]
    lb = [(x.serial, x.kind, x.nbytes, x.category, x.event) for x in b.allocation_log]
    assert la == lb, next(i for i,(x,y) in enumerate(zip(la,lb)) if x!=y) if len(la)==len(lb) else (len(la), len(lb))
    assert a.storages == b.storages
    assert a.events == b.events, "events"
    assert a.event_categories == b.event_categories
    for f in ("peak_allocated_bytes","peak_event","categories","peak_allocation","peak_serials","parameter_count","input_shape","reserved_bytes"):
        assert getattr(a,f) == getattr(b,f), (f, getattr(a,f), getattr(b,f))
model, opts = sys.argv[1], eval(sys.argv[2])
t=time.perf_counter(); w = profile_step(model, **opts); t1=time.perf_counter()-t
t=time.perf_counter(); f = profile_step(model, full_trace=True, **opts); t2=time.perf_counter()-t
print(w.depth_note, "|", f.depth_note, f"written {t1:.2f}s full {t2:.2f}s")
cmp(w, f); print("EQUAL", w.peak_allocated_bytes)
