"""The per-layer quantization report in the HTML export report, worst layer first."""

import html
import re

import crossport
from crossport.parity.render import export_html
from tests.export.test_quantize import _calibration, outlier  # noqa: F401  (fixture)


def test_html_report_lists_the_outlier_conv_first(outlier, tmp_path):  # noqa: F811
    result = crossport.export(outlier, tmp_path / "m.tflite", "tflite-int8-full",
                              calibration=_calibration((1, 3, 16, 16)))
    page = export_html(outlier, result, tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text(encoding="utf-8") == page
    table = page[page.index('id="quantized-layers"'):]
    names = [html.unescape(name) for name in  # "<root> (mean)": escaped in the page
             re.findall(r'<tr class="qlayer"><td>\d+</td><td><code>([^<]+)</code>', table)]
    assert names[0] == "body", names
    assert names == [row.name for row in result.quantization.layers]
    assert {"stem", "head"} <= set(names)
    q = result.quantization
    assert f"{q.sqnr_db:.1f} dB" in page and f"{q.max_error:.2e}" in page
    assert "PASS" in page and "time: export re-check" in page
    assert result.quantization.to_html() in page


def test_html_report_escapes_names_and_says_fail():
    from crossport.export import ExportResult, QuantizationReport, QuantizedLayer

    report = QuantizationReport("tflite-int8-full", sqnr_db=3.0, min_sqnr_db=15.0,
                                max_error=0.5, layers=[QuantizedLayer(
                                    "<script>", "CONV_2D", 0.1, 0.1, 0.2, 0.05, 3)])
    result = ExportResult("m.tflite", "tflite-int8-full", 0.5, None, 1.0, quantization=report)
    page = export_html(None, result)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "FAIL" in page
