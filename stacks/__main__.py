"""What Pulumi runs in a clone (Pulumi.yaml: `main: stacks/`): the program, stacks.program.

Pulumi runs this directory with it first on sys.path: take it off (its modules would shadow
top-level ones) and put the source tree there, so the components import as the `stacks`
package. An installed slurmforge has the program as slurmforge.stacks.program (docs/aws.md).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from stacks.program import main  # noqa: E402

if __name__ == "__main__":
    main()
