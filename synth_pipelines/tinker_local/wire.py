"""The protobuf side of the Tinker wire: forward_backward in, fwd/bwd and sample results out.

The schema is the SDK's own (`tinker.proto.tinker_public_pb2`), so the server reads and
writes exactly the messages the pinned SDK encodes and decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError
from tinker.proto import tinker_public_pb2 as pb

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.sampling import SampleOutput, TopkRows

_NUMPY_DTYPES: dict[int, np.dtype] = {
    pb.DTYPE_FLOAT32: np.dtype(np.float32),
    pb.DTYPE_INT64: np.dtype(np.int64),
    pb.DTYPE_INT32: np.dtype(np.int32),
    pb.DTYPE_BFLOAT16: np.dtype(np.uint16),
}


@dataclass(frozen=True)
class WireDatum:
    tokens: np.ndarray
    inputs: dict[str, np.ndarray]


@dataclass(frozen=True)
class ForwardBackwardCall:
    """A decoded request; its datums are unpacked only when the operation runs, in order."""

    message: pb.ForwardBackwardRequest

    @property
    def model_id(self) -> str:
        return self.message.model_id

    @property
    def seq_id(self) -> int:
        return self.message.seq_id

    @property
    def loss_fn(self) -> str:
        return self.message.loss_fn

    @property
    def forward_only(self) -> bool:
        return self.message.forward_only

    def loss_fn_config(self) -> dict[str, float | str]:
        if self.message.loss_fn_config_v2:
            return {
                key: value.text if value.WhichOneof("value") == "text" else value.number
                for key, value in self.message.loss_fn_config_v2.items()
            }
        return dict(self.message.loss_fn_config.items())

    def datums(self) -> list[WireDatum]:
        return [_datum(index, datum) for index, datum in enumerate(self.message.data)]


def parse_forward_backward(body: bytes) -> ForwardBackwardCall:
    message = pb.ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as error:
        raise UserError(
            f"the forward_backward body is not a tinker_public.ForwardBackwardRequest: {error}"
        ) from None
    return ForwardBackwardCall(message)


def _datum(index: int, datum: pb.Datum) -> WireDatum:
    pieces = []
    for position, chunk in enumerate(datum.model_input):
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise UserError(
                f"datum {index}: model_input chunk {position} is a {kind} chunk; the local "
                "service trains on token (encoded_text) chunks only"
            )
        pieces.append(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32))
    tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    inputs = {
        name: _tensor(f"datum {index}: loss_fn_inputs[{name!r}]", tensor)
        for name, tensor in datum.loss_fn_inputs.items()
    }
    return WireDatum(tokens, inputs)


def _tensor(where: str, tensor: pb.Tensor) -> np.ndarray:
    dtype = _NUMPY_DTYPES.get(tensor.dtype)
    if dtype is None:
        raise UserError(f"{where} has unsupported dtype {tensor.dtype}; use float32 or int64")
    shape = list(tensor.shape)
    if tensor.WhichOneof("encoding") == "sparse_csr":
        values = _widened(np.frombuffer(tensor.sparse_csr.values, dtype=dtype), tensor.dtype)
        crow = np.frombuffer(tensor.sparse_csr.crow_indices, dtype=np.int64)
        col = np.frombuffer(tensor.sparse_csr.col_indices, dtype=np.int64)
        if len(shape) != 2 or crow.size != shape[0] + 1 or col.size != values.size:
            raise UserError(f"{where} is a malformed sparse CSR tensor (shape {shape})")
        dense = np.zeros(shape, dtype=values.dtype)
        dense[np.repeat(np.arange(shape[0]), np.diff(crow)), col] = values
        return dense
    values = _widened(np.frombuffer(tensor.dense, dtype=dtype), tensor.dtype)
    if not shape:
        return values
    if int(np.prod(shape)) != values.size:
        raise UserError(f"{where} declares shape {shape} but holds {values.size} values")
    return values.reshape(shape)


def _widened(values: np.ndarray, proto_dtype: int) -> np.ndarray:
    if proto_dtype == pb.DTYPE_BFLOAT16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values


def encode_forward_backward_output(
    fields: dict[str, list[np.ndarray]], metrics: dict[str, float]
) -> bytes:
    """One ArrayRecord whose fields hold every datum's float32 vector, sliced by byte offsets."""
    num_datums = len(next(iter(fields.values()))) if fields else 0
    record = pb.ArrayRecord(num_datums=num_datums)
    for name, arrays in fields.items():
        values = [np.ascontiguousarray(array, dtype=np.float32) for array in arrays]
        offsets = np.cumsum([0, *(value.nbytes for value in values)], dtype=np.int64)
        batched = record.fields[name]
        batched.data = b"".join(value.tobytes() for value in values)
        batched.offsets = offsets.tobytes()
        batched.dtype = pb.DTYPE_FLOAT32
    output = pb.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord", loss_fn_outputs=[record], metrics=metrics
    )
    encoded: bytes = output.SerializeToString()
    return encoded


def encode_sample_response(output: SampleOutput) -> bytes:
    message = pb.SampleResponse()
    for sequence in output.sequences:
        sampled = message.sequences.add()
        sampled.stop_reason = (
            pb.STOP_REASON_STOP if sequence.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        )
        sampled.tokens = np.asarray(sequence.tokens, dtype=np.int32).tobytes()
        sampled.logprobs = np.asarray(sequence.logprobs, dtype=np.float32).tobytes()
        if sequence.topk is not None:
            sampled.topk_sampled_logprobs.CopyFrom(_topk(sequence.topk))
    if output.prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(output.prompt_logprobs, dtype=np.float32).tobytes()
    if output.prompt_topk is not None:
        message.topk_prompt_logprobs.CopyFrom(_topk(output.prompt_topk))
    encoded: bytes = message.SerializeToString()
    return encoded


def _topk(rows: TopkRows) -> pb.TopkLogprobs:
    length, k = rows.token_ids.shape
    return pb.TopkLogprobs(
        token_ids=np.ascontiguousarray(rows.token_ids, dtype=np.int32).tobytes(),
        logprobs=np.ascontiguousarray(rows.logprobs, dtype=np.float32).tobytes(),
        k=k,
        length=length,
    )
