"""A Hugging Face ``TrainerCallback`` that records goodput: one line in the user's trainer.

::

    from goodput_integrations.torch.hf import GoodputTrainerCallback

    trainer = Trainer(..., callbacks=[GoodputTrainerCallback(Recorder("my-run"))])

What it records (through the PyTorch adapter, which it turns on unless one
is on already: compiles, DCP, process-group init, signals, metadata, rank 0
writes unless ``per_host=True``), from the hooks alone (a callback is given
no trainer; transformers 5.x):

* the job: start at ``on_init_end`` (or ``on_train_begin`` when the callback
  was added after the trainer was built), end at ``on_train_end``
  (``record_job=False`` when you record the job yourself); a crash is
  recorded by the adapter's exception hook;
* training preparation from ``on_init_end`` to ``on_train_begin`` (inside
  ``train()``: optimizer and accelerator set-up, and a
  ``resume_from_checkpoint`` load, which the hooks cannot tell apart);
* steps: one per optimizer step, ``state.global_step`` at ``on_step_begin``
  to ``on_step_end`` (gradient accumulation: the micro-batches are one
  step);
* data loading: the Trainer fetches a step's batches (all micro-batches)
  right before ``on_step_begin``: from the previous boundary (a step's end,
  a log, an evaluation or a save) to the step's start;
* evaluation as the custom badput event ``eval``: from the boundary before
  it (the step's end, or its training log) to ``on_evaluate``; the log
  written inside the evaluation (``on_log`` with its metrics) is not a
  boundary;
* checkpoint saves: from the boundary before (the step's end, its log or
  its evaluation) to ``on_save``, which the Trainer calls right after it
  wrote the checkpoint.

Importing this module imports transformers; without it it raises
:class:`AdapterUnavailable`.
"""

from __future__ import annotations

from typing import Any, Optional

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.base.spans import record_custom, record_save
from goodput_integrations.torch import _probe
from goodput_integrations.torch._trainer_clock import CallbackState, PhaseClock, TrainerRun

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise AdapterUnavailable("the Hugging Face callback needs transformers: "
                             "pip install transformers accelerate") from exc

__all__ = ["GoodputTrainerCallback"]


class GoodputTrainerCallback(CallbackState, TrainerCallback):
    """Records a Hugging Face Trainer's goodput phases (see the module docstring).

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      record_job: record the job start and end here.
      eval_event: the custom badput event type of evaluation.
      **adapter_options: :class:`~goodput_integrations.torch.TorchAdapter`
        options for the adapter this callback turns on (ignored when one is
        on already).
    """

    def __init__(self, recorder: Any, *, record_job: bool = True, eval_event: str = "eval",
                 **adapter_options: Any):
        super().__init__(recorder, record_job, eval_event, adapter_options)
        self._in_eval = False

    def _ensure(self) -> Optional[PhaseClock]:
        if self._clock is not None:
            return self._clock
        try:
            self._run = run = TrainerRun(self.recorder, self.record_job, self._options)
            self._clock = run.clock
            run.begin()
        except Exception:
            _probe.log_once("hf-start", "goodput: the Hugging Face callback could not start")
        return self._clock

    # ------------------------------------------------------------ the job
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._ensure()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._ensure() is not None:
            self._run.training_starts()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        run, self._run, self._clock = self._run, None, None
        if run is not None:
            run.end()

    # -------------------------------------------------------------- steps
    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock is not None and self._clock.step is None and self._clock.mark is None:
            self._clock.boundary()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock is not None:
            self._clock.load_then_step(int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock is not None:
            self._clock.step_done()

    # ------------------------------------------- what follows a step's end
    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
               **kwargs: Any) -> None:
        # the training log (loss, learning rate) is part of the step's
        # bookkeeping; the evaluation's own log is inside the evaluation
        if self._clock is None or self._in_eval or _is_eval_log(logs):
            return
        self._clock.boundary()

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._in_eval = True

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._in_eval = False
        if self._clock is not None:
            self._clock.phase(record_custom, self.eval_event)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._clock is not None:
            self._clock.phase(record_save, int(state.global_step))


def _is_eval_log(logs: Any) -> bool:
    return isinstance(logs, dict) and any(str(k).startswith("eval_") for k in logs)
