"""The course's colours: every figure and widget draws from these tables.

The Okabe-Ito palette (M. Okabe and K. Ito, *Color Universal Design*, 2002;
B. Wong, "Points of view: Color blindness", Nature Methods 8, 441, 2011):
eight colours that stay distinct for the common kinds of colour blindness,
plus ``grey`` for "other".  Colours are ``#RRGGBB`` strings.
"""

OKABE_ITO = {
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "black": "#000000",
    "grey": "#999999",
}

#: One colour per category of :data:`helpers.record.CATEGORIES`.  Neighbours in that order (the order of a stacked bar)
#: differ in hue and in lightness, so that they contrast in grey scale too.
CATEGORY_COLORS = {
    "parameters": OKABE_ITO["blue"],
    "gradients": OKABE_ITO["orange"],
    "optimizer_states": OKABE_ITO["reddish purple"],
    "input": OKABE_ITO["yellow"],
    "activations": OKABE_ITO["bluish green"],
    "other": OKABE_ITO["grey"],
}

#: Colours of what a real snapshot holds beside the categories (:data:`helpers.snapshot.SNAPSHOT_CATEGORIES`).
SNAPSHOT_COLORS = {"cublas_workspaces": OKABE_ITO["black"], "cudnn_workspaces": OKABE_ITO["sky blue"],
                   "before_recording": OKABE_ITO["vermillion"]}

#: Line colours, in order, for figures that overlay several steps or settings.
LINE_COLORS = tuple(OKABE_ITO[name] for name in ("blue", "vermillion", "bluish green", "reddish purple", "orange",
                                                 "sky blue", "black"))

#: Colours, in order, for parts that are not the step's categories (a transformer block's parts).
PART_COLORS = tuple(OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion", "sky blue",
                                                 "reddish purple", "yellow", "black"))

#: Greys of the figures: memory reserved but free and its edge, the backward pass's shading, quiet text.
GREYS = {"free": "#f4f4f4", "free edge": "#a0a0a0", "backward": "#f0f0f0", "text": "#555555"}

#: Colours of vLLM's start-up account (lesson 10) beside the categories: its weights are ``parameters`` and its
#: profile run's activation peak ``activations`` (:data:`CATEGORY_COLORS`); its non-torch memory, assumed, is
#: hatched as every assumed overhead is; what ``gpu_memory_utilization`` leaves unused is the grey of free memory.
SERVING_COLORS = {"kv_cache": OKABE_ITO["vermillion"], "unused": "#dcdcdc"}
