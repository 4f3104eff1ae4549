#!/usr/bin/python3
"""An independent reader of TensorBoard event files, for tandem's tests.

It does not use tandem's .proto: the three messages scalars need are declared here from
TensorBoard's own field numbers (tensorflow/core/util/event.proto: Event.wall_time = 1,
step = 2, file_version = 3, summary = 5; summary.proto: Summary.value = 1,
Summary.Value.tag = 1, simple_value = 2) and decoded with Debian's python3-protobuf.
Every record's length and data checksums are checked with python3-crc32c.

Usage: read_events.py FILE...   prints one JSON object per scalar: {"step", "tag", "value"}
(value null for NaN, "inf"/"-inf" for infinities). Exits 1 naming the file, the record and
what is wrong on a bad checksum, a truncated record or a wrong first record.
"""
import json
import math
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def event_classes():
    file = descriptor_pb2.FileDescriptorProto(name="independent_event.proto", package="reader", syntax="proto3")
    value = file.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary = file.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, type_name=".reader.Value", label=F.LABEL_REPEATED)
    event = file.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, type_name=".reader.Summary", label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.MessageFactory(pool).GetPrototype(pool.FindMessageTypeByName("reader.Event"))


def masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class BadFile(Exception):
    pass


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    at, index = 0, 0
    while at < len(blob):
        if len(blob) - at < 12:
            raise BadFile(f"{path}: record {index} at byte {at}: truncated header ({len(blob) - at} bytes)")
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if masked(header) != length_crc:
            raise BadFile(f"{path}: record {index} at byte {at}: length checksum mismatch")
        if len(blob) - at - 12 < length + 4:
            raise BadFile(f"{path}: record {index} at byte {at}: truncated data ({length} bytes announced)")
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        if masked(data) != data_crc:
            raise BadFile(f"{path}: record {index} at byte {at}: data checksum mismatch")
        yield index, data
        at += 16 + length
        index += 1


def scalars(path, Event):
    out = []
    for index, data in records(path):
        event = Event()
        event.ParseFromString(data)
        if index == 0:
            if event.file_version != "brain.Event:2":
                raise BadFile(f"{path}: first record is not file_version brain.Event:2 ({event.file_version!r})")
            continue
        if not event.HasField("summary"):
            raise BadFile(f"{path}: record {index} has no summary")
        for v in event.summary.value:
            value = v.simple_value
            if math.isnan(value):
                value = None
            elif math.isinf(value):
                value = "inf" if value > 0 else "-inf"
            out.append({"step": event.step, "tag": v.tag, "value": value, "wall_time": event.wall_time})
    return out


def main():
    Event = event_classes()
    try:
        for path in sys.argv[1:]:
            for row in scalars(path, Event):
                print(json.dumps(row))
    except BadFile as e:
        print(f"read_events: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
