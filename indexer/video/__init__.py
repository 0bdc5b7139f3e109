"""Videos: recognise them by content, probe them, sample their frames with PyAV.

The media layer the indexer calls for a video file: ``detect`` (is it a video, by its
first bytes), ``probe`` (duration, rate, displayed size, codec, rotation, when and where)
and ``sample`` (frames at least every few seconds and at scene cuts, at reduced size,
with their times; one full-size frame at a given time for masks). Every failure is a
``VideoError`` with a short reason, as ``imaging.DecodeError`` is for photos.

Only ``detect`` is named here. ``probe`` and ``sample`` import PyAV (FFmpeg's libraries,
~16 MB mapped), and every walk and media-kind question imports this package (the web
app's too): import them from their modules (``wherein.indexer.video.probe``) where a
video is read, so a process that never reads one never loads FFmpeg. (Re-exporting them
lazily does not work: importing the submodule ``probe`` binds the package's ``probe`` to
the module, over the function of that name.)
"""

from wherein.indexer.video.detect import VIDEO_EXTENSIONS, is_video_file, is_video_name, sniff

__all__ = ["VIDEO_EXTENSIONS", "is_video_file", "is_video_name", "sniff"]
