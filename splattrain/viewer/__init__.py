"""The browser viewer (viser): the page, rendering the browsers' views, cameras and images.

Used by :class:`splattrain.hooks.ViewerHook` and ``splattrain view``; needs the ``viewer``
extra, imported only when a viewer starts.
"""
