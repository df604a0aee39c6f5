"""Page forms: create a corpus, upload a file. Errors name the problem (the same messages as the API)."""
from __future__ import annotations

from django import forms

from apps.corpora.embedder import EmbedderError
from apps.corpora.parsing import IngestError, check_file
from apps.corpora.search import MODES
from apps.corpora.uploads import read_upload


class CorpusForm(forms.Form):
    name = forms.CharField(max_length=100)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)


class UploadForm(forms.Form):
    # allow_empty_file: an empty file gets our message (naming the file) rather than Django's
    file = forms.FileField(allow_empty_file=True,
                           help_text=".txt .md .html .jsonl ({\"title\",\"text\"} per line) .pdf, or a .zip of those")

    def clean_file(self):
        uploaded = self.cleaned_data["file"]
        try:
            data = read_upload(uploaded)
            check_file(data, uploaded.name)
        except (IngestError, EmbedderError) as exc:
            raise forms.ValidationError(str(exc)) from None
        self.data_bytes = data
        return uploaded


class SearchForm(forms.Form):
    q = forms.CharField(max_length=2000)
    k = forms.IntegerField(min_value=1, max_value=50, initial=5, required=False)
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="hybrid", required=False)
