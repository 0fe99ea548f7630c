# Every value here comes from the var file nodeforge writes (`*.pkrvars.json`) from the resolved
# vars of one image and, for where the builder runs, the pipeline config's `builder` section;
# nothing in it is chosen by hand. A null default leaves the setting to Packer.

variable "region" {
  type        = string
  description = "Region the builder runs in and the AMI is registered in."
}

variable "instance_type" {
  type        = string
  default     = "c6i.4xlarge"
  description = "Builder instance: a CPU instance of the image's architecture; build mode needs no GPU."
}

variable "source_ami" {
  type        = string
  default     = null
  description = "Base AMI id, resolved by nodeforge from the OS entry's SSM parameter at build time."
}

variable "source_ami_owners" {
  type        = list(string)
  default     = []
  description = "Owners for the OS entry's name filter (when it has one instead of an SSM parameter)."
}

variable "source_ami_name_filter" {
  type        = string
  default     = null
  description = "AMI name filter from the OS entry; the newest match is used."
}

variable "source_ami_architecture" {
  type        = string
  description = "x86_64 or arm64: keeps a name filter from matching the other architecture."
}

variable "volume_size_gib" {
  type        = number
  description = "Root volume size (the image's build.volume_size_gib)."
}

variable "root_device" {
  type        = string
  description = "Root device name of the base OS (the OS entry's root_device)."
}

variable "ssh_username" {
  type        = string
  description = "Login user of the base OS (the OS entry's default_user)."
}

variable "kms_key_id" {
  type        = string
  default     = null
  description = "KMS key for the encrypted root volume; the account's default EBS key when null."
}

variable "volume_iops" {
  type        = number
  default     = null
  description = "gp3 IOPS of the builder's root volume (the image's build.volume_iops); gp3's 3000 when null."
}

variable "volume_throughput_mibps" {
  type        = number
  default     = null
  description = "gp3 throughput of the builder's root volume in MiB/s (build.volume_throughput_mibps); 125 when null."
}

variable "subnet_id" {
  type        = string
  default     = null
  description = "Subnet of the builder (pipeline config builder.subnet_id, else subnet_id); the default VPC when null."
}

variable "security_group_ids" {
  type        = list(string)
  default     = null
  description = "Security groups of the builder; a temporary group that admits SSH when null."
}

variable "temporary_security_group_source_cidrs" {
  type        = list(string)
  default     = null
  description = "Where the temporary group admits SSH from (Packer's default: 0.0.0.0/0)."
}

variable "ssh_interface" {
  type        = string
  default     = null
  description = "public_ip, private_ip, public_dns, private_dns or session_manager."
}

variable "associate_public_ip_address" {
  type        = bool
  default     = null
  description = "Give the builder a public IP (the subnet's setting when null)."
}

variable "iam_instance_profile" {
  type        = string
  default     = null
  description = "Instance profile of the builder (session_manager needs one that allows SSM)."
}

variable "vars_file" {
  type        = string
  description = "Absolute path of the resolved vars (nodeforge render) handed to ansible-playbook."
}

variable "builder_check_command" {
  type        = string
  description = "The command line (shell-quoted) that runs validation's build stage against the builder before the AMI is registered."
}

variable "ami_name" {
  type        = string
  description = "Unique AMI name: image, stack and a UTC timestamp."
}

variable "image_name" {
  type        = string
  description = "The catalog image this AMI is built from."
}

variable "stack_name" {
  type        = string
  description = "The stack (pinned versions) the image installs."
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Stack versions and the bill of materials, set on the AMI and its snapshots."
}

variable "manifest_path" {
  type        = string
  default     = "build/packer-manifest.json"
  description = "Where the manifest post-processor writes the artifact list."
}
