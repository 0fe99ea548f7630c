# Exact pins: `packer init` installs these and nothing newer, so two builds of one commit use the
# same plugin code. Versions checked against the plugins' release tags (reference/stack-facts.md 8.1).
packer {
  required_version = ">= 1.11.0"
  required_plugins {
    amazon = {
      version = "= 1.8.2"
      source  = "github.com/hashicorp/amazon"
    }
    ansible = {
      version = "= 1.1.6"
      source  = "github.com/hashicorp/ansible"
    }
  }
}
