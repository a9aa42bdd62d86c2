"""One training job, three ways: a raw PyTorch loop instrumented by hand, Lightning
with GoodputCallback, the Hugging Face Trainer with GoodputTrainerCallback.

The job's phases take known times, whichever loop runs it: every batch takes
``LOAD_S`` to produce (in the DataLoader), every forward pass ``STEP_S``,
every checkpoint ``SAVE_S`` more (a ``state_dict`` hook: each framework
calls ``state_dict()`` once per checkpoint it writes), and an evaluation
runs ``EVAL_BATCHES`` batches. Every ``EVERY`` steps: an evaluation, then a
checkpoint.

Run as ``python -m tests.integrations.torch.trainer_jobs {hand,lightning,hf} STORE RUN DIR``.
"""

from __future__ import annotations

import sys
import time

import torch

from goodput_core import Recorder

STEPS, EVERY, EVAL_BATCHES = 30, 10, 3
LOAD_S, STEP_S, SAVE_S = 0.04, 0.03, 0.1
FEATURES = 16


class SleepyBatches(torch.utils.data.Dataset):
    """Each item is a whole batch and takes LOAD_S to produce."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, k: int):
        time.sleep(LOAD_S)
        g = torch.Generator().manual_seed(k)
        x = torch.randn(8, FEATURES, generator=g)
        return {"x": x, "labels": (x.sum(dim=1) > 0).long()}


class SleepyModel(torch.nn.Module):
    """A tiny classifier whose forward takes STEP_S and whose state_dict() SAVE_S."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 2)
        self.register_state_dict_post_hook(lambda *a, **k: time.sleep(SAVE_S))

    def forward(self, x, labels=None):
        time.sleep(STEP_S)
        logits = self.net(x)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return {"loss": loss, "logits": logits}


def _single(batch):
    """Collates a list of one whole batch into that batch."""
    return batch[0]


def hand(store: str, run: str, folder: str) -> None:
    from goodput_integrations import torch as gtorch

    rec = Recorder(run, store)
    with rec.job(), gtorch.instrumented(rec):
        with rec.training_preparation():
            model = SleepyModel()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = gtorch.instrument_loader(torch.utils.data.DataLoader(
                SleepyBatches(STEPS), batch_size=1, collate_fn=_single))
            evals = torch.utils.data.DataLoader(SleepyBatches(EVAL_BATCHES), batch_size=1,
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


def lightning(store: str, run: str, folder: str) -> None:
    import lightning as L

    from goodput_integrations.torch.lightning import GoodputCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = SleepyModel()

        def training_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def validation_step(self, batch, batch_idx):
            return self.model(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    train = torch.utils.data.DataLoader(SleepyBatches(STEPS), batch_size=1, collate_fn=_single)
    val = torch.utils.data.DataLoader(SleepyBatches(EVAL_BATCHES), batch_size=1,
                                      collate_fn=_single)
    checkpoints = L.pytorch.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=EVERY,
                                                      save_top_k=-1, save_last=False)
    trainer = L.Trainer(
        max_steps=STEPS, val_check_interval=EVERY, num_sanity_val_steps=0, accelerator="cpu",
        devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[GoodputCallback(Recorder(run, store)), checkpoints],
        default_root_dir=folder)
    trainer.fit(Module(), train, val)


def hf(store: str, run: str, folder: str) -> None:
    from transformers import Trainer, TrainingArguments

    from goodput_integrations.torch.hf import GoodputTrainerCallback

    args = TrainingArguments(
        output_dir=folder, max_steps=STEPS, per_device_train_batch_size=1,
        per_device_eval_batch_size=1, eval_strategy="steps", eval_steps=EVERY,
        save_strategy="steps", save_steps=EVERY, save_only_model=True, logging_steps=EVERY,
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
        )
    trainer = Trainer(model=SleepyModel(), args=args, train_dataset=SleepyBatches(STEPS),
                      eval_dataset=SleepyBatches(EVAL_BATCHES), data_collator=_single,
                      callbacks=[GoodputTrainerCallback(Recorder(run, store))])
    trainer.train()


if __name__ == "__main__":
    torch.set_num_threads(1)
    {"hand": hand, "lightning": lightning, "hf": hf}[sys.argv[1]](*sys.argv[2:5])
