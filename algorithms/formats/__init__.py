"""Schedule file formats: ``collsched.schedule/1`` JSON (``schedule``) and MSCCL-IR XML (``msccl``).

``load``, ``loads`` and ``save`` take either format (``files``: by content when reading, by name when
writing); the modules below read and write one format each. Nothing here imports torch.
"""

from algorithms.formats.files import is_xml_path, load, loads, save
from algorithms.formats.schedule import FORMAT, MAX_FILE_BYTES, dumps, from_dict, to_dict

__all__ = ["FORMAT", "MAX_FILE_BYTES", "dumps", "from_dict", "is_xml_path", "load", "loads", "save", "to_dict"]
