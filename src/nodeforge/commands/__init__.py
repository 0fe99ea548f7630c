"""The subcommands of the `nodeforge` command line, grouped by what they act on."""
