"""Module publishing: LMOD module definitions (`modules/`), their Lua modulefiles, and
the engine that publishes them into a shared tree through an Executor.

Import the part you use (slurmforge.modules.publisher, .catalog, ...): this package
imports nothing, so `slurmforge modules --help` does not load the definitions' models."""
