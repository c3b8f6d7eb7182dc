"""Module publishing: LMOD module definitions (`modules/`), their Lua modulefiles, and
the engine that publishes them into a shared tree through a slurmforge.remote Executor.

Import the part you use (slurmforge.lmod.publisher, .catalog, ...): this package
imports nothing, so `slurmforge modules --help` does not load the definitions' models."""
