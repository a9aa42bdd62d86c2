"""What the framework adapters share (``goodput_integrations.base``).

The JAX and PyTorch adapters record the same phases the same way where
their frameworks agree: one active adapter per framework that module-level
wrappers look up at call time (:mod:`.slot`), an adapter object whose hooks
go on and off together (:mod:`.adapter`), loads timed around ``next()``
(:mod:`.data`), numbered step calls (:mod:`.steps`), functions of the
framework wrapped and put back (:mod:`.patch`), spans recorded with
explicit times (:mod:`.spans`) and installed versions (:mod:`.versions`).
Each adapter keeps what is its framework's own. Nothing here imports a
framework.
"""
