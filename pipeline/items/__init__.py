"""Item selection: quota selection from the candidate pool (selection) and the answer choices and letters (choices)."""
