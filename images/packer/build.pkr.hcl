build {
  name    = "nodeforge"
  sources = ["source.amazon-ebs.node"]

  # First pass: the kernel and base layer only, then a reboot inside the play
  # (ansible.builtin.reboot waits until SSH answers again), so the second pass builds the NVIDIA
  # modules against the kernel the node boots, not the one the base AMI shipped with.
  # Facts stay in memory: Packer names every builder `default`, so ansible.cfg's jsonfile cache
  # would hand one build (or the pass after the reboot) another machine's facts.
  provisioner "ansible" {
    playbook_file    = "${local.repo_root}/playbooks/image.yml"
    user             = var.ssh_username
    use_proxy        = false
    ansible_env_vars = local.ansible_env_vars
    extra_arguments = [
      "--extra-vars", "@${var.vars_file}",
      "--extra-vars", "nodeforge_build_phase=kernel",
    ]
  }

  # Second pass: every enabled layer, on the new kernel.
  provisioner "ansible" {
    playbook_file    = "${local.repo_root}/playbooks/image.yml"
    user             = var.ssh_username
    use_proxy        = false
    ansible_env_vars = local.ansible_env_vars
    extra_arguments  = ["--extra-vars", "@${var.vars_file}"]
  }

  # The build stage of validation/ against the builder, before the AMI is registered: a failing
  # check fails the build and no AMI exists (src/nodeforge/packer/builder_check.py). The checks
  # reach the builder over SSH, with the address and temporary key Packer connects with.
  provisioner "shell-local" {
    environment_vars = [
      "NODEFORGE_BUILDER_HOST=${build.Host}",
      "NODEFORGE_BUILDER_PORT=${build.Port}",
      "NODEFORGE_BUILDER_USER=${build.User}",
      "NODEFORGE_BUILDER_SSH_KEY=${build.SSHPrivateKey}",
    ]
    inline = [var.builder_check_command]
  }

  post-processor "manifest" {
    output     = var.manifest_path
    strip_path = true
    custom_data = {
      image = var.image_name
      stack = var.stack_name
    }
  }
}
