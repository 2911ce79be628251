"""A run's checkpoints: written atomically, kept within their retention, verified, and restored.

    checkpoint.py         a run's checkpoint folder: atomic publish, retention, newest valid, resume
    checkpoint_format.py  one checkpoint's files: safetensors + JSON encoding, manifest, verify, read
    resume.py             what a node's checkpoint holds; restoring it, and what a restart lost
    file_mode.py          the mode written files get (0666 less the umask; safetensors writes 0600)
"""
