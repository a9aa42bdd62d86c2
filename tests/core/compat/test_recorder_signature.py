"""docs/recording.md: GoodputRecorder takes the reference's arguments (same order and
defaults) plus optional ones of ours; so do its public methods. Compared
with the installed ml-goodput-measurement."""

from __future__ import annotations

import inspect

from ml_goodput_measurement.src import goodput as ref

from goodput_core.compat import goodput as ours


def _same_prefix_then_optional(our_fn, ref_fn):
    ref_params = list(inspect.signature(ref_fn).parameters.values())
    our_params = list(inspect.signature(our_fn).parameters.values())
    head, extra = our_params[:len(ref_params)], our_params[len(ref_params):]
    assert [(p.name, p.kind, p.default) for p in head] == \
        [(p.name, p.kind, p.default) for p in ref_params], our_fn.__name__
    # anything of ours comes after, and a call written for the reference never needs it
    assert all(p.default is not p.empty or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
               for p in extra), our_fn.__name__


def test_recorder_constructor_and_methods_take_the_references_arguments():
    _same_prefix_then_optional(ours.GoodputRecorder.__init__, ref.GoodputRecorder.__init__)
    public = [n for n in vars(ref.GoodputRecorder) if not n.startswith("_")]
    assert "record_step_start_time" in public and "flush" in public
    for name in public:
        _same_prefix_then_optional(getattr(ours.GoodputRecorder, name),
                                   getattr(ref.GoodputRecorder, name))
    extra = {p.name for p in inspect.signature(ours.GoodputRecorder.__init__).parameters.values()
             if p.kind is p.KEYWORD_ONLY}
    assert {"store", "clock", "strict"} <= extra
