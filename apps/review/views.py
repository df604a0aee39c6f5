from django.shortcuts import render


def index(request):
    return render(request, "empty.html", {
        "title": "Review",
        "empty_headline": "Nothing to review.",
        "empty_hint": "Tasks, rubrics and grades that runs generate are sampled into this queue for spot-checks.",
        "action_url": "",
        "action_label": "",
    })
