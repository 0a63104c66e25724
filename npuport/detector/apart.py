"""A long stage of `npuport demo` in a spawned child process, its progress lines relayed over a queue.

A stage that loads a 118M-parameter model, a 250k-piece tokenizer, or a runtime's session keeps much of that memory
after it is freed (glibc keeps its arenas, runtimes keep their pools), so the next stage would start from the last
one's high-water mark. Apart, the memory goes back to the system when the child exits, and each stage's peak is its
own plus what the parent holds meanwhile."""

from __future__ import annotations

from typing import Any, Callable

from ..ui import ProgressFn as Progress


def run_apart(target: Callable, args: tuple, progress: Progress, name: str) -> tuple[Any, float]:
    """target(*args, say) in a spawned child (target: a module-level function; say: a ProgressFn relayed here).
    Returns (its result, the peak memory in MB: the child's own peak plus this process's resident memory). Its
    exception is raised here, as the same type where it pickles. Ctrl-C reaches both; the child gets time to clean."""
    import multiprocessing as mp
    import queue

    from ..errors import NpuportError
    from ..machine import rss_mb

    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    child = ctx.Process(target=_child, args=(target, args, messages), name=f"npuport-{name}")
    held = rss_mb()
    child.start()
    result = None
    try:
        while result is None:
            try:
                kind, payload = messages.get(timeout=0.5)
            except queue.Empty:
                if not child.is_alive():
                    raise NpuportError(f"the {name} process ended without a result (exit code {child.exitcode})") from None
                continue
            if kind == "say":
                progress(payload)
            else:
                result = (kind, payload)
        child.join()
    finally:
        if child.is_alive():  # interrupted here: the child got the same Ctrl-C; give it time to clean its staging
            child.join(timeout=30)
            if child.is_alive():
                child.terminate()  # taken as Ctrl-C there: a stage inside a long C call may not act on it at once
                child.join(timeout=10)
                if child.is_alive():
                    child.kill()
                    child.join()
    kind, payload = result
    if kind == "error":
        raise payload
    value, peak = payload
    return value, round(peak + held, 1)


def _child(target: Callable, args: tuple, messages) -> None:
    import multiprocessing as mp

    from ..interrupt import die_with_parent, raise_if_interrupted, terminate_interrupts
    from ..machine import bound_heap, peak_rss_mb

    # The stage ends with the demo, however the demo ended: a killed `npuport demo` left its build training on for
    # minutes, beside whatever ran next. SIGTERM (the parent's death, or anyone's) is handled as Ctrl-C here, so the
    # stage's staging directory is removed on the way out.
    terminate_interrupts()
    die_with_parent(mp.parent_process().pid)

    def say(message: str) -> None:
        raise_if_interrupted()  # a SIGTERM swallowed by some __del__ still stops the stage here
        messages.put(("say", message))

    bound_heap()
    try:
        value = target(*args, say)
        messages.put(("done", (value, peak_rss_mb())))
    except BaseException as e:  # noqa: BLE001 - handed to the parent, which raises it
        try:
            messages.put(("error", e))
        except Exception:  # an exception that does not pickle: its text
            from ..errors import NpuportError

            messages.put(("error", NpuportError(f"{type(e).__name__}: {e}")))
