"""The main job of ``goodput demo`` (``goodput_integrations.demo``).

A small Flax model trained on CPU with Orbax checkpoints, every adapter on,
recording to the embedded store; one run of it is one *attempt*:

* :mod:`goodput_integrations.demo.train` is the attempt, a child-process
  entry point (``python -m goodput_integrations.demo.train ...``). It resumes
  from the latest checkpoint when there is one and can kill itself with
  SIGKILL at a chosen step (a real crash: no job end, no ``atexit``).
* :mod:`goodput_core.cli.demo_attempts` (the ``goodput demo`` command's side,
  which runs this one as a program and never imports it) starts attempts
  from a parent process and reads what they report (``Attempt``), and its
  ``run_crash_and_restart`` plays the demo: a crash, then a restart from the
  last checkpoint to the end (``goodput demo --torch``:
  :mod:`goodput_core.cli.demo_torchrun`, with :mod:`.torch_train`).

The child reports on stdout, one JSON object per line after
``PROTOCOL_PREFIX`` (other output of the child is ignored), so a parent
can draw a progress bar or kill it at a known point without sleeping.
Messages (the ``event`` key):

==============  ==============================================================
``attempt``     ``attempt`` (the recorder's attempt id), ``pid``, ``steps``
                (the last step + 1); sent right after the job start
``restored``    ``step``: resumed from this checkpoint (none: from step 0)
``step``        ``step``: dispatched, its events recorded; ``time`` (POSIX s, then);
                ``loss`` at the steps that synced
``saved``       ``step``: a checkpoint save was started (async commit)
``flushed``     ``written``: events stored so far (after a successful
                ``recorder.flush()``; with ``--flush-every``); ``own``: of them,
                this attempt's (not those it delivered for a killed one)
``crash``       ``step``: about to SIGKILL itself
``done``        ``step`` (steps trained in all), ``loss``, ``written``
==============  ==============================================================

Importing this package imports neither jax nor the training module.
"""
