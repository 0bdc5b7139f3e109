"""Videos: recognise them by content, probe them, sample their frames with PyAV.

The media layer the indexer calls for a video file: ``detect`` (is it a video, by its
first bytes), ``probe`` (duration, rate, displayed size, codec, rotation, when and where)
and ``sample`` (frames at least every few seconds and at scene cuts, at reduced size,
with their times; one full-size frame at a given time for masks). Every failure is a
``VideoError`` with a short reason, as ``imaging.DecodeError`` is for photos.
"""

from wherein.indexer.video.detect import VIDEO_EXTENSIONS, is_video_file, is_video_name, sniff
from wherein.indexer.video.probe import VideoError, VideoInfo, parse_iso6709, probe
from wherein.indexer.video.sample import Frame, Sampling, frame_at, sample

__all__ = [
    "VIDEO_EXTENSIONS",
    "Frame",
    "Sampling",
    "VideoError",
    "VideoInfo",
    "frame_at",
    "is_video_file",
    "is_video_name",
    "parse_iso6709",
    "probe",
    "sample",
    "sniff",
]
