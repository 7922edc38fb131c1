"""The collector: PrecisionDebugger and its hooks (framework-neutral core, one adapter per framework)."""
