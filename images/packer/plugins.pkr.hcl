# Exact pins: `packer init` installs these and nothing newer, so two builds of one commit use the
# same plugin code. Versions checked against the plugins' release tags (reference/stack-facts.md 8.1).
# Packer 1.14.1 or later: `packer init` of official plugins from HashiCorp's release site
# (amazon 1.3.10 and later are released only there; hashicorp/packer#13445).
packer {
  required_version = ">= 1.14.1"
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
