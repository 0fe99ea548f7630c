locals {
  # Packer runs from anywhere; the playbook and ansible.cfg sit two folders above the templates.
  repo_root = abspath("${path.root}/../..")
  ansible_env_vars = [
    "ANSIBLE_CONFIG=${local.repo_root}/ansible.cfg",
    "ANSIBLE_NOCOLOR=1",
    "ANSIBLE_CACHE_PLUGIN=memory",
  ]
  identity_tags = {
    "Name"             = var.ami_name
    "nodeforge:image"  = var.image_name
    "nodeforge:stack"  = var.stack_name
    "nodeforge:status" = "built"
  }
}

source "amazon-ebs" "node" {
  region          = var.region
  instance_type   = var.instance_type
  ami_name        = var.ami_name
  ami_description = "nodeforge ${var.image_name} (stack ${var.stack_name})"
  ssh_username    = var.ssh_username
  # Packer's temporary key leaves the build user's authorized_keys before the AMI is taken.
  ssh_clear_authorized_keys = true

  # A 150 GiB snapshot can take longer than the plugin's default wait for the AMI.
  aws_polling {
    delay_seconds = 30
    max_attempts  = 240
  }

  # Exactly one of these is set by the var file: an id resolved from SSM, or the OS's filter.
  source_ami = var.source_ami
  dynamic "source_ami_filter" {
    for_each = var.source_ami_name_filter == null ? [] : [var.source_ami_name_filter]
    content {
      filters = {
        name                = source_ami_filter.value
        architecture        = var.source_ami_architecture
        root-device-type    = "ebs"
        virtualization-type = "hvm"
      }
      owners      = var.source_ami_owners
      most_recent = true
    }
  }

  # IMDSv2 only, on the builder and on every instance launched from the AMI.
  imds_support = "v2.0"
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }
  ena_support = true

  # Where the builder runs: the pipeline config's builder section, else Packer's defaults.
  subnet_id                             = var.subnet_id
  security_group_ids                    = var.security_group_ids
  temporary_security_group_source_cidrs = var.temporary_security_group_source_cidrs
  ssh_interface                         = var.ssh_interface
  associate_public_ip_address           = var.associate_public_ip_address
  iam_instance_profile                  = var.iam_instance_profile

  launch_block_device_mappings {
    device_name           = var.root_device
    volume_size           = var.volume_size_gib
    volume_type           = "gp3"
    # CreateImage keeps the volume's IOPS and throughput in the AMI's mapping (it can change only
    # DeleteOnTermination of an existing mapping): instances launched without their own root
    # mapping get them too.
    iops                  = var.volume_iops
    throughput            = var.volume_throughput_mibps
    encrypted             = true
    kms_key_id            = var.kms_key_id
    delete_on_termination = true
  }

  tags          = merge(var.tags, local.identity_tags)
  snapshot_tags = merge(var.tags, local.identity_tags)
  run_tags = {
    "Name"            = "nodeforge-builder ${var.image_name}"
    "nodeforge:image" = var.image_name
  }
}
