"""The program that runs *inside* the code sandbox (shipped as ``rewardlab.sandbox_runtime``).

Stdlib only; nothing here imports rewardlab. ``rewardlab.sandbox`` finds these files with
``importlib.resources`` and starts ``server.py`` as ``python -I -S <real path>/server.py``:

* ``server.py``  the fork server: trusted checker + untrusted worker per job (see its docstring)
* ``worker.py``, ``checker.py``, ``pymodes.py``, ``execjob.py``  the untrusted and trusted sides of a job
* ``wire.py``    length-prefixed JSON framing and the tagged plain-data codec
* ``confine.py`` rlimits, Landlock and seccomp through ctypes
* ``launch.py``  drops root privileges before exec (the trainer is never forked)
* ``reaper.py``  tiers B / unsafe: outlives the server and kills what is left of its jobs
"""
