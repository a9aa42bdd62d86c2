"""A complete PyTorch training loop instrumented for goodput (CPU; torchrun too).

    pip install torch 'goodput-core'
    python examples/torch_training_loop.py --store /tmp/goodput.sqlite --run-name my-run \
        --ckpt-dir /tmp/my-run-ckpt
    torchrun --nproc-per-node 2 --max-restarts 1 examples/torch_training_loop.py \
        --store /tmp/goodput.sqlite --run-name my-run --ckpt-dir /tmp/my-run-ckpt
    goodput report my-run --store /tmp/goodput.sqlite

The loop itself is ``integrations/demo/torch_train.py`` (the package
``goodput_integrations.demo.torch_train``, which ``goodput demo --torch`` runs
under torchrun): a small MLP, a ``DataLoader`` with worker processes,
``torch.compile``, DDP over gloo, DCP saves, resume from the last checkpoint.
tests/integrations/torch/ runs this file.
"""

from goodput_integrations.demo.torch_train import main

if __name__ == "__main__":
    main()
