from django.shortcuts import render


def index(request):
    return render(request, "empty.html", {
        "title": "Evaluations",
        "empty_headline": "No evaluations yet.",
        "empty_hint": "Score a checkpoint or the base model on GSM8K, GPQA-Diamond, AIME 2025 or your own JSONL set.",
        "action_url": "",
        "action_label": "",
    })
