from countersign.path.approval import Checked
from countersign.store import ClaimApproval
