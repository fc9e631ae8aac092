"""Pure helpers every layer may use: time, untrusted job output, marks, extras, the loop
offload, documents, the ``kf-trainer`` commands printed as hints."""
