from django.shortcuts import render


def index(request):
    return render(request, "empty.html", {
        "title": "Corpora",
        "empty_headline": "No corpora yet.",
        "empty_hint": "Load the bundled Wikipedia corpus with `manage.py load_wikipedia`, or upload .txt, .md, .html, .jsonl or .pdf files.",
        "action_url": "",
        "action_label": "",
    })
