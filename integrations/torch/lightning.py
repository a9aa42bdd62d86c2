"""A Lightning ``Callback`` that records goodput: one line in the user's trainer.

::

    from goodput_integrations.torch.lightning import GoodputCallback

    trainer = L.Trainer(..., callbacks=[GoodputCallback(Recorder("my-run"))])

What it records (through the PyTorch adapter, which it turns on unless one
is on already: compiles, DCP, process-group init, signals, metadata, rank 0
writes unless ``per_host=True``):

* the job: start at ``setup`` (stage ``fit``), end at ``teardown`` after a
  successful fit; an exception (``on_exception``) is an ``exception:<Type>``
  disruption instead (``record_job=False`` when you record the job yourself,
  e.g. ``with rec.job():`` around ``trainer.fit``);
* training preparation from ``setup`` to ``on_train_start`` (model set-up,
  optimizers, the checkpoint restore and the sanity check are inside it and
  counted as restore and ``eval`` by priority);
* steps: one per optimizer step (``trainer.global_step``), from the first
  ``on_train_batch_start`` of the step to the ``on_train_batch_end`` where the
  optimizer stepped (gradient accumulation: the micro-batches are one step);
* data loading: from the previous boundary (a step's end, a validation's
  end, a checkpoint's end, the epoch's start) to the step's start: Lightning
  fetches the batch and moves it to the device exactly there;
* validation (and the sanity check) as the custom badput event ``eval``;
* checkpoint saves: ``trainer.save_checkpoint`` (what ``ModelCheckpoint`` and
  the SLURM requeue call), and restores: ``trainer.strategy.load_checkpoint``
  (``fit(ckpt_path=...)``), each timed by a wrapper on the instance for the
  duration of the fit.

Importing this module imports Lightning (``lightning`` or ``pytorch_lightning``);
without either it raises :class:`AdapterUnavailable`.
"""

from __future__ import annotations

from typing import Any, Optional

from goodput_integrations.errors import AdapterUnavailable
from goodput_integrations.jax.signals import DISRUPTION_RECORDED_ATTR
from goodput_integrations.base.spans import record_custom, record_restore, record_save
from goodput_integrations.torch import _probe
from goodput_integrations.torch._trainer_clock import CallbackState, PhaseClock, TrainerRun

try:
    from lightning.pytorch import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning import Callback  # type: ignore[no-redef]
    except ImportError as exc:
        raise AdapterUnavailable("the Lightning callback needs Lightning: pip install lightning"
                                 ) from exc

__all__ = ["GoodputCallback"]


class GoodputCallback(CallbackState, Callback):
    """Records a Lightning fit's goodput phases (see the module docstring).

    Args:
      recorder: a :class:`goodput_core.Recorder`.
      record_job: record the job start and end (and a crash) here.
      eval_event: the custom badput event type of validation.
      **adapter_options: :class:`~goodput_integrations.torch.TorchAdapter`
        options (``per_host``, ``sync_every``...) for the adapter this
        callback turns on; ignored when one is on already.
    """

    def __init__(self, recorder: Any, *, record_job: bool = True, eval_event: str = "eval",
                 **adapter_options: Any):
        super().__init__(recorder, record_job, eval_event, adapter_options)
        self._wrapped: list = []
        self._failed = False

    # ------------------------------------------------------------ set-up
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        try:
            self._start(trainer)
        except Exception:
            _probe.log_once("lightning-setup", "goodput: the Lightning callback could not start")

    def _start(self, trainer: Any) -> None:
        self._run = run = TrainerRun(self.recorder, self.record_job, self._options)
        self._clock = clock = run.clock
        self._failed = False
        run.begin()

        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            return clock.timed(record_save, getattr(trainer, "global_step", None),
                               orig_save, *args, **kwargs)

        def load_checkpoint(*args: Any, **kwargs: Any) -> Any:
            return clock.timed(record_restore, None, orig_load, *args, **kwargs)

        orig_save = trainer.save_checkpoint
        self._wrap(trainer, "save_checkpoint", save_checkpoint)
        strategy = getattr(trainer, "strategy", None)
        orig_load = getattr(strategy, "load_checkpoint", None)
        if callable(orig_load):
            self._wrap(strategy, "load_checkpoint", load_checkpoint)

    def _wrap(self, owner: Any, name: str, wrapper: Any) -> None:
        had = name in vars(owner)
        self._wrapped.append((owner, name, had, vars(owner).get(name), wrapper))
        setattr(owner, name, wrapper)

    def _unwrap(self) -> None:
        for owner, name, had, before, wrapper in reversed(self._wrapped):
            if vars(owner).get(name) is wrapper:
                if had:
                    setattr(owner, name, before)
                else:
                    delattr(owner, name)
        self._wrapped = []

    # ------------------------------------------------------------- phases
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self._run is not None:
            self._run.training_starts()

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        if self._clock is not None:
            self._clock.boundary()

    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        if self._clock is not None:
            self._clock.phase(record_custom, self.eval_event)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._clock is not None:
            self._clock.boundary()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        clock = self._clock
        if clock is None:
            return
        step = int(trainer.global_step)
        if clock.step == step:
            return  # a later micro-batch of the same optimizer step
        clock.load_then_step(step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        clock = self._clock
        if clock is None or clock.step is None:
            return
        if int(trainer.global_step) > clock.step:  # the optimizer stepped
            clock.step_done(_loss(outputs))

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # from the boundary before it (the step's end, or a checkpoint saved
        # after it): the validation loop's set-up and batches
        if self._clock is not None and not getattr(trainer, "sanity_checking", False):
            self._clock.phase(record_custom, self.eval_event)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        run = self._run
        self._failed = True
        if run is None or not self.record_job:
            return
        try:
            run.adapter.emit(self.recorder.record_disruption,
                             f"exception:{type(exception).__name__}")
            setattr(exception, DISRUPTION_RECORDED_ATTR, True)
            self.recorder.flush(2.0)
        except Exception:
            _probe.log_once("lightning-exception", "goodput: recording a crash failed")

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self._run is None:
            return
        run, self._run, self._clock = self._run, None, None
        self._unwrap()
        run.end(failed=self._failed)


def _loss(outputs: Any) -> Any:
    """The tensor a training step returned (what the CUDA stall watch observes)."""
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return outputs
