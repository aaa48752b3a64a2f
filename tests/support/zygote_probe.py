"""Imported in a zygote's child through TRAINREADY_IMPORT (tests/unit/suites/train/test_zygote.py): records
what the child saw when the run's --import modules load -- its environment, and which of torch's
compile stacks had been imported before (none may be: the child must start fresh)."""

import json
import os
import sys
import tempfile

with open(os.environ["ZYGOTE_PROBE_OUT"], "w") as f:
    json.dump(
        {
            "marker": os.environ.get("ZYGOTE_PROBE_MARKER"),
            "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
            "tempdir": tempfile.gettempdir(),
            "torch": "torch" in sys.modules,
            "preloaded": sorted(
                m
                for m in ("torch._dynamo", "torch._inductor", "torch._inductor.config")
                if m in sys.modules
            ),
            "pid": os.getpid(),
        },
        f,
    )
