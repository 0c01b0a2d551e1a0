"""What the kernel would get wrong is refused with a one-line reason before anything launches."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnprof.kernels import import_from_folder  # noqa: E402


def _qkv(heads=4, kv_heads=2, seq=16, dim=64, dtype=torch.float16):
    q = torch.randn(1, heads, seq, dim).to(dtype)
    return q, torch.randn(1, kv_heads, seq, dim).to(dtype), torch.randn(1, kv_heads, seq, dim).to(dtype)


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head_dim"),
    (lambda q, k, v: (q.float(), k.float(), v.float()), "float16 or bfloat16"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of key/value heads"),
    (lambda q, k, v: (q, k[:, :0], v[:, :0]), "at least one head"),
])
def test_unsupported_inputs_are_refused_with_a_reason(change, message):
    with pytest.raises(ValueError, match=message):
        import_from_folder().attention(*change(*_qkv()))


def test_bfloat16_under_the_interpreter_is_refused_not_computed_wrong(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="bfloat16 is refused under Triton's interpreter.*float16"):
        import_from_folder().attention(*_qkv(dtype=torch.bfloat16), causal=True)


@pytest.mark.parametrize("offset", [1.5, 2.0, True, "3"])
def test_a_causal_offset_that_is_not_an_int_is_refused(offset):
    with pytest.raises(TypeError, match="causal_offset must be an int"):
        import_from_folder().attention(*_qkv(), causal=True, causal_offset=offset)


def test_attention_refuses_keywords_it_does_not_take_and_names_its_own_spelling():
    with pytest.raises(TypeError, match=r"does not take attn_mask, is_causal \(is_causal is spelled causal here\)"):
        import_from_folder().attention(*_qkv(), is_causal=True, attn_mask=None)


@pytest.mark.parametrize("options, error, message", [
    ({"block_table": torch.zeros(1)}, NotImplementedError, r"block_table \(only at block_table=None\)"),
    ({"softcap": -1.0}, ValueError, "softcap must be >= 0"),  # softcap itself is implemented (masks.py)
    ({"alibi_slopes": torch.ones(4)}, NotImplementedError, "alibi_slopes"),
    ({"dropout_p": 0.1}, NotImplementedError, "dropout"),
    ({"window": 3}, TypeError, "flash_attn_func does not take window"),
])
def test_flash_attn_func_refuses_options_that_would_change_the_result(options, error, message):
    q, k, v = (t.transpose(1, 2) for t in _qkv())
    with pytest.raises(error, match=message):
        import_from_folder().flash_attn_func(q, k, v, **options)
