# Diagnostics for a bench worker: times AnalyticsStore.apply_batch and probes event-loop lag.
import importlib.abc, importlib.util, os, sys, threading, time, json, gc

OUT = os.environ.get("HS_DIAG", "/tmp/s10/diag.jsonl")
_f = None
def emit(**kw):
    global _f
    if _f is None:
        _f = open(OUT + f".{os.getpid()}", "a", buffering=1)
    kw["t"] = time.time()
    _f.write(json.dumps(kw) + "\n")

def patch_analytics(mod):
    store = mod.AnalyticsStore
    orig = store.apply_batch
    def apply_batch(self, events, focus):
        t0 = time.perf_counter()
        orig(self, events, focus)
        emit(k="fold", n=len(events), ms=(time.perf_counter() - t0) * 1000)
    store.apply_batch = apply_batch

def patch_dispatcher(mod):
    import asyncio
    cls = mod.Dispatcher
    orig = cls.run
    started = []
    async def run(self, *a, **kw):
        if not started:
            started.append(1)
            loop = asyncio.get_running_loop()
            def probe():
                while True:
                    time.sleep(0.01)
                    t0 = time.perf_counter()
                    ev = threading.Event()
                    loop.call_soon_threadsafe(ev.set)
                    ev.wait()
                    lag = (time.perf_counter() - t0) * 1000
                    if lag > 10:
                        emit(k="lag", ms=lag)
            threading.Thread(target=probe, daemon=True).start()
        return await orig(self, *a, **kw)
    cls.run = run

def gc_cb(phase, info):
    if info.get("generation") == 2:
        if phase == "start":
            gc_cb.t0 = time.perf_counter()
        else:
            emit(k="gc2", ms=(time.perf_counter() - gc_cb.t0) * 1000)
gc.callbacks.append(gc_cb)

PATCHES = {"streams.agents.analytics": patch_analytics, "streams.agents.dispatcher": patch_dispatcher}

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        orig_exec = loader.exec_module
        def exec_module(module):
            orig_exec(module)
            PATCHES[name](module)
        loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Finder())
