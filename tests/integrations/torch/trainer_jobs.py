"""One training job, three ways: a raw PyTorch loop instrumented by hand, Lightning
with GoodputCallback, the Hugging Face Trainer with GoodputTrainerCallback.

Every run records on a :class:`~tests.support.fake_clock.FakeClock` given to
its ``Recorder`` (the adapter and both callbacks read the recorder's clock),
and the job's own work moves that clock by known amounts, whichever loop
runs it: producing a batch (the dataset's ``__getitem__``) ``LOAD_S``, a
forward pass ``FORWARD_S``, its backward pass ``BACKWARD_S`` (an autograd
function on the logits), an optimizer step ``OPTIMIZER_S`` (a global
optimizer hook: the frameworks build their own optimizers), and every
checkpoint ``SAVE_S`` more (a ``state_dict`` hook: each framework calls
``state_dict()`` once per checkpoint it writes). An evaluation runs
``EVAL_BATCHES`` batches (loads and forward passes). Every ``EVERY`` steps:
an evaluation and a checkpoint. Nothing else moves the clock, so the
frameworks' own work between their hooks takes no recorded time: each
bucket is exactly the job's time in that phase (:data:`TRUTH`), however
busy the machine, and a phase recorded in the wrong bucket, or a
timestamp from another clock, shows at once. The durations are powers of
two: their sums are exact in floating point.

Run as ``python -m tests.integrations.torch.trainer_jobs {hand,lightning,hf} STORE RUN DIR``.
"""

from __future__ import annotations

import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from goodput_core import Recorder
from tests.support.fake_clock import FakeClock

STEPS, EVERY, EVAL_BATCHES = 30, 10, 3
LOAD_S, FORWARD_S, BACKWARD_S, OPTIMIZER_S, SAVE_S = 2.0 ** -2, 2.0 ** -3, 2.0 ** -4, \
    2.0 ** -5, 2.0 ** -1
FEATURES = 16
EVALS = STEPS // EVERY

#: the job's time in each bucket by construction (nothing else moves the clock)
TRUTH = {"productive": STEPS * (FORWARD_S + BACKWARD_S + OPTIMIZER_S),
         "load": STEPS * LOAD_S,
         "eval": EVALS * EVAL_BATCHES * (LOAD_S + FORWARD_S),
         "save": EVALS * SAVE_S,
         "restore": 0.0, "wasted": 0.0, "prep": 0.0, "other": 0.0}
TRUTH["total"] = sum(TRUTH.values())

CLOCK = FakeClock(1024.0)


class Batches(torch.utils.data.Dataset):
    """Each item is a whole batch and takes LOAD_S to produce."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int):
        if k >= self.n:
            raise IndexError(k)
        CLOCK.advance(LOAD_S)
        g = torch.Generator().manual_seed(k)
        x = torch.randn(8, FEATURES, generator=g)
        return {"x": x, "labels": (x.sum(dim=1) > 0).long()}


class _Backward(torch.autograd.Function):
    """The identity, whose backward pass takes BACKWARD_S."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        CLOCK.advance(BACKWARD_S)
        return grad


class Model(torch.nn.Module):
    """A tiny classifier: forward FORWARD_S, backward BACKWARD_S, state_dict() SAVE_S."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 2)
        self.register_state_dict_post_hook(lambda *a, **k: CLOCK.advance(SAVE_S))

    def forward(self, x, labels=None):
        CLOCK.advance(FORWARD_S)
        logits = _Backward.apply(self.net(x))
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def _optimizer_step(optimizer, args, kwargs) -> None:
    CLOCK.advance(OPTIMIZER_S)


def _single(batch):
    """Collates a list of one whole batch into that batch."""
    return batch[0]


def recorder(store: str, run: str) -> Recorder:
    return Recorder(run, store, clock=CLOCK)


def hand(store: str, run: str, folder: str) -> None:
    from goodput_integrations import torch as gtorch

    rec = recorder(store, run)
    with rec.job(), gtorch.instrumented(rec):
        with rec.training_preparation():
            model = Model()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = gtorch.instrument_loader(torch.utils.data.DataLoader(
                Batches(STEPS), batch_size=1, collate_fn=_single))
            evals = torch.utils.data.DataLoader(Batches(EVAL_BATCHES), batch_size=1,
                                                collate_fn=_single)

        def step(batch):
            opt.zero_grad()
            loss = model(**batch)["loss"]
            loss.backward()
            opt.step()
            return loss

        train_step = gtorch.train_step(step)
        for k, batch in enumerate(loader, start=1):
            train_step(batch)
            if k % EVERY == 0:
                with rec.custom_badput_event("eval"), torch.no_grad():
                    for b in evals:
                        model(**b)
                with rec.checkpoint_save(k):  # state_dict() is part of the save
                    torch.save(model.state_dict(), f"{folder}/hand-{k}.pt")
    rec.close()


def lightning(store: str, run: str, folder: str) -> None:
    import lightning as L

    from goodput_integrations.torch.lightning import GoodputCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = Model()

        def training_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def validation_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    train = torch.utils.data.DataLoader(Batches(STEPS), batch_size=1, collate_fn=_single)
    val = torch.utils.data.DataLoader(Batches(EVAL_BATCHES), batch_size=1, collate_fn=_single)
    checkpoints = L.pytorch.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=EVERY,
                                                      save_top_k=-1, save_last=False)
    rec = recorder(store, run)
    trainer = L.Trainer(
        max_steps=STEPS, val_check_interval=EVERY, num_sanity_val_steps=0, accelerator="cpu",
        devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[GoodputCallback(rec), checkpoints], default_root_dir=folder)
    trainer.fit(Module(), train, val)
    rec.close()


def hf(store: str, run: str, folder: str) -> None:
    from transformers import Trainer, TrainingArguments

    from goodput_integrations.torch.hf import GoodputTrainerCallback

    args = TrainingArguments(
        output_dir=folder, max_steps=STEPS, per_device_train_batch_size=1,
        per_device_eval_batch_size=1, eval_strategy="steps", eval_steps=EVERY,
        save_strategy="steps", save_steps=EVERY, save_only_model=True, logging_steps=EVERY,
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    rec = recorder(store, run)
    trainer = Trainer(model=Model(), args=args, train_dataset=Batches(STEPS),
                      eval_dataset=Batches(EVAL_BATCHES), data_collator=_single,
                      callbacks=[GoodputTrainerCallback(rec)])
    trainer.train()
    rec.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    register_optimizer_step_post_hook(_optimizer_step)
    {"hand": hand, "lightning": lightning, "hf": hf}[sys.argv[1]](*sys.argv[2:5])
