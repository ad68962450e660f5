"""Generated from proto/countersign/v1 by scripts/gen_proto.sh (make proto); do not edit."""
