"""The AWS half of the golden AMI pipeline: launch, validate, publish or fail, prune.

Nothing here holds a client or a session at module level: callers pass a boto3 session in, so
that tests (moto) and callers with their own credentials get the same code paths.
"""
