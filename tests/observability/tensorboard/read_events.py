#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for tandem's tests.

It does not use tandem's .proto: the three messages scalars need are declared here, with
TensorBoard's own field numbers (tensorflow/core/util/event.proto: Event.wall_time = 1,
step = 2, file_version = 3, summary = 5; framework/summary.proto: Summary.value = 1,
Summary.Value.tag = 1, simple_value = 2), and decoded by Debian's python3-protobuf.
Every record's length and data checksums are checked with python3-crc32c.

Usage: read_events.py PATH...   (an event file, or a directory: its files named *tfevents*)
prints one JSON object per scalar: {"step", "tag", "value", "wall_time"}, the value null
for NaN and "inf" / "-inf" for infinities, and one per SessionLog event (session_log = 7,
its status = 1): {"step", "session_log": "START" (or STOP, CHECKPOINT), "wall_time"}. Exits 1, naming the file, the record and what is
wrong, on a bad checksum, a truncated record, an undecodable Event, a first record that is
not file_version "brain.Event:2", or a file with no records.
"""
import json
import math
import pathlib
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

FIELD = descriptor_pb2.FieldDescriptorProto
FILE_VERSION = "brain.Event:2"
SESSION_STATUS = ["STATUS_UNSPECIFIED", "START", "STOP", "CHECKPOINT"]


def event_class():
    """The Event message class, built at run time from a descriptor written here."""
    file = descriptor_pb2.FileDescriptorProto(name="independent_event.proto", package="reader", syntax="proto3")
    value = file.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=FIELD.TYPE_FLOAT, label=FIELD.LABEL_OPTIONAL)
    session_log = file.message_type.add(name="SessionLog")
    status = session_log.enum_type.add(name="SessionStatus")
    for number, name in enumerate(SESSION_STATUS):
        status.value.add(name=name, number=number)
    session_log.field.add(name="status", number=1, type=FIELD.TYPE_ENUM, type_name=".reader.SessionLog.SessionStatus",
                          label=FIELD.LABEL_OPTIONAL)
    summary = file.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=FIELD.TYPE_MESSAGE, type_name=".reader.Value",
                      label=FIELD.LABEL_REPEATED)
    event = file.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=FIELD.TYPE_DOUBLE, label=FIELD.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=FIELD.TYPE_INT64, label=FIELD.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=FIELD.TYPE_STRING, label=FIELD.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=FIELD.TYPE_MESSAGE, type_name=".reader.Summary",
                    label=FIELD.LABEL_OPTIONAL)
    event.field.add(name="session_log", number=7, type=FIELD.TYPE_MESSAGE, type_name=".reader.SessionLog",
                    label=FIELD.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    descriptor = pool.FindMessageTypeByName("reader.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.21
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class BadEventFile(Exception):
    pass


def records(path):
    """Yields (index, data) of each TFRecord of the file, every checksum checked."""
    blob = pathlib.Path(path).read_bytes()
    at, index = 0, 0
    while at < len(blob):
        where = f"{path}: record {index} at byte {at}"
        if len(blob) - at < 12:
            raise BadEventFile(f"{where}: truncated length header ({len(blob) - at} of 12 bytes)")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if masked_crc(header) != length_crc:
            raise BadEventFile(f"{where}: length checksum mismatch")
        if len(blob) - at - 12 < length + 4:
            raise BadEventFile(f"{where}: truncated data ({length} + 4 bytes announced, "
                               f"{len(blob) - at - 12} left)")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if masked_crc(data) != data_crc:
            raise BadEventFile(f"{where}: data checksum mismatch")
        yield index, data
        at += 16 + length
        index += 1
    if index == 0:
        raise BadEventFile(f"{path}: no records (an event file starts with file_version {FILE_VERSION})")


def json_value(value):
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def scalars(path, Event):
    """The scalars and session logs of one event file, as dicts, in file order."""
    out = []
    for index, data in records(path):
        event = Event()
        try:
            event.ParseFromString(data)
        except message.DecodeError as e:
            raise BadEventFile(f"{path}: record {index}: not an Event: {e}") from e
        if index == 0:
            if event.file_version != FILE_VERSION:
                raise BadEventFile(f"{path}: the first record is not file_version {FILE_VERSION} "
                                   f"(file_version {event.file_version!r})")
            continue
        if event.HasField("session_log"):
            status = event.session_log.status
            out.append({"step": event.step, "wall_time": event.wall_time,
                        "session_log": SESSION_STATUS[status] if status < len(SESSION_STATUS) else str(status)})
            continue
        if not event.HasField("summary"):
            raise BadEventFile(f"{path}: record {index} (step {event.step}) holds neither a summary nor a session log")
        for value in event.summary.value:
            out.append({"step": event.step, "tag": value.tag, "value": json_value(value.simple_value),
                        "wall_time": event.wall_time})
    return out


def event_files(path):
    path = pathlib.Path(path)
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.iterdir() if "tfevents" in p.name)
    if not files:
        raise BadEventFile(f"{path}: no event files (*tfevents*) in this directory")
    return files


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    Event = event_class()
    try:
        for arg in sys.argv[1:]:
            for path in event_files(arg):
                for row in scalars(path, Event):
                    print(json.dumps(row))
    except (BadEventFile, OSError) as e:
        print(f"read_events: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
