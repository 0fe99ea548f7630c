"""nodeforge: Ansible-driven GPU node image and software-stack builder for AWS."""

__version__ = "0.1.0"
