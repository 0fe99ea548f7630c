"""The catalog: stacks, profiles, OS entries and images under one directory."""
