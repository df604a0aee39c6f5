from django.shortcuts import render


def index(request):
    return render(request, "empty.html", {
        "title": "Runs",
        "empty_headline": "No runs yet.",
        "empty_hint": "Launch a self-play run: pick a method, a model and a corpus, then watch it learn live.",
        "action_url": "/runs/new/",
        "action_label": "Launch a run",
    })
