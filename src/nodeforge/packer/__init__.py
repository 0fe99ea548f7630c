"""The golden AMI pipeline's Packer half: templates, their rules, var files, and the runner."""
